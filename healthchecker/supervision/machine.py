"""The supervision step: `step(state, event, now) -> (state, actions)`, a pure state machine.

Owns: how each event moves one service between phases (module doc of the package), when a
dead service is restarted and with what back-off, the stall correction, and (with
`hung_timeout_s` set) the leader's inspection of a silent service: frozen (SIGSTOP, paused) or
not running is dead at once; running is slow, and dead only once silent `hung_timeout_s`.

Invariants: only the leader emits `Restart`, and at once when a service is DEAD and its back-off
allows (`not_before`); a restart is followed by `ShareState`; a tick more than `stall_gap_s`
after the previous one shifts every clock of the table by the gap (`Stalled`), so the node does
not blame the services for its own silence; the checker never supervises itself.

Threads: none; no sockets, threads or clocks here: `now` is passed in.
"""

from __future__ import annotations

from dataclasses import replace

from healthchecker.supervision.config import SupervisionConfig, backoff_s
from healthchecker.supervision.events import (
    Action,
    Departed,
    Event,
    Expected,
    Inspect,
    Inspected,
    Leadership,
    Lost,
    PeerState,
    Restart,
    RestartDone,
    Seen,
    ShareState,
    Stalled,
    Tick,
    transition,
)
from healthchecker.supervision.peers import on_peer_state
from healthchecker.supervision.records import (
    SAME_RESTART_TOLERANCE_S,
    SERVICES_MAX,
    Phase,
    ServiceRecord,
    SupervisionState,
)


def step(
    state: SupervisionState, event: Event, now: float
) -> tuple[SupervisionState, list[Action]]:
    """Advance the supervision by one event at time `now`; returns the new state and actions."""
    if isinstance(event, Tick):
        return _on_tick(state, now)
    if isinstance(event, Leadership):
        return _on_leadership(state, event, now)
    if isinstance(event, Expected):
        return _on_expected(state, event, now)
    if isinstance(event, PeerState):
        return on_peer_state(state, event, now)
    name = event.name
    if name == state.config.self_name:
        return state, []
    record = state.records.get(name)
    if isinstance(event, Seen):
        new, actions = _on_seen(record, event, now)
    elif isinstance(event, Departed):
        new, actions = _on_departed(record, event, now)
    elif isinstance(event, Lost):
        new, actions = _on_lost(record, event, now)
    elif isinstance(event, Inspected):
        new, actions = _on_inspected(record, event, now)
    else:
        assert isinstance(event, RestartDone), f"unknown event {event!r}"
        new, actions = _on_restart_done(state.config, record, event, now)
    if new is None or (record is None and len(state.records) >= SERVICES_MAX):
        return state, []
    return replace(state, records={**state.records, name: new}), actions



def _on_seen(record: ServiceRecord | None, event: Seen, now: float):
    if record is None:
        new = ServiceRecord(Phase.UP, since=now, last_seen_at=now, instance=event.instance,
                            seen_here=True)
        return new, transition(event.name, None, new, "first seen")
    if record.phase is Phase.STARTING and event.instance and (
        event.instance == record.replaced_instance
    ):
        return None, []  # the replaced instance, between unpause and kill: not a sign of life
    in_restart = record.phase is Phase.STARTING and bool(event.instance) and (
        record.in_flight or record.peer_in_flight
    )
    if record.phase is Phase.UP:
        # Beating on after its restart was confirmed (the replaced instance is killed by then),
        # or another instance: either way, no longer maybe the replaced one.
        in_restart = record.seen_in_restart and record.in_flight and (
            event.instance == record.instance
        )
    reasons = {
        Phase.STARTING: f"first sign of life {now - record.since:.1f}s after the restart"
        + (" (while the restart is in flight: maybe the replaced instance)" if in_restart else ""),
        Phase.DEAD: "alive again before its restart",
        Phase.UNKNOWN: "seen",
        Phase.DEPARTED: "seen again after its goodbye",
    }
    new = replace(
        record,
        phase=Phase.UP,
        since=record.since if record.phase is Phase.UP else now,
        last_seen_at=now,
        instance=event.instance or record.instance,
        start_misses=0,
        replaced_instance="",
        seen_here=True,
        inspected_silence=None,
        inspect_asked_at=None,
        runs_while_silent=False,
        seen_in_restart=in_restart,
    )
    return new, transition(event.name, record, new, reasons.get(record.phase, ""))


def _is_seen_in_restart(record: ServiceRecord, instance: str) -> bool:
    return record.phase is Phase.UP and record.seen_in_restart and (
        instance == record.instance
    )


def _replaced_after_all(name: str, record: ServiceRecord, now: float, what: str):
    """The instance first seen while its restart was in flight is lost or silent: it was the
    replaced one (a start that outlived its deadline beats once, then the restart kills it), not
    a new death. Back to STARTING, awaiting the new instance; if that one never comes, the
    start deadline (or the restarter's listing of it as stopped) restarts it once."""
    new = replace(record, phase=Phase.STARTING, since=now, replaced_instance=record.instance,
                  seen_in_restart=False, start_misses=0, inspected_silence=None,
                  inspect_asked_at=None, runs_while_silent=False)
    cause = f"{what}: the instance seen during its restart was the replaced one"
    return new, transition(name, record, new, cause)


def _on_departed(record: ServiceRecord | None, event: Departed, now: float):
    # The goodbye of an instance a restart replaced (late, or sent as the restart stopped it)
    # says nothing of the service: it is still to be started, also while a failed restart
    # waits out its back-off (DEAD), lest it count as stopped on purpose and never return.
    if record is not None and record.phase in (Phase.STARTING, Phase.DEAD) and (
        event.instance and event.instance == record.replaced_instance
    ):
        return None, []
    if record is not None and record.phase is Phase.DEPARTED:
        return None, []
    if record is not None and _is_seen_in_restart(record, event.instance):
        return _replaced_after_all(event.name, record, now, "said goodbye")
    old = record or ServiceRecord(Phase.UNKNOWN, since=now)
    new = replace(old, phase=Phase.DEPARTED, since=now, last_seen_at=now,
                  instance=event.instance or old.instance, replaced_instance="")
    return new, transition(event.name, record, new, "said goodbye (stopped on purpose)")


def _on_lost(record: ServiceRecord | None, event: Lost, now: float):
    if record is None or record.phase is not Phase.UP:
        return None, []  # only an up service can be lost; a starting one has no connection yet
    if event.instance and record.instance and event.instance != record.instance:
        return None, []  # an older instance's connection closing late
    if _is_seen_in_restart(record, event.instance):
        return _replaced_after_all(event.name, record, now, event.reason)
    new = replace(record, phase=Phase.DEAD, since=now, cause=event.reason)
    return new, transition(event.name, record, new, event.reason)


def _on_inspected(record: ServiceRecord | None, event: Inspected, now: float):
    if record is not None and record.phase in (Phase.STARTING, Phase.UNKNOWN):
        return _on_inspected_starting(record, event, now)
    if record is None or record.phase is not Phase.UP or (
        record.inspected_silence != event.silent_since
    ):
        return None, []  # seen again meanwhile, or an answer about an older silence
    if event.frozen is False:
        return replace(record, runs_while_silent=True), []
    silent_s = now - event.silent_since
    what = "no heartbeat" + (f" from {record.instance}" if record.instance else "")
    state = "frozen" if event.frozen else "state unknown"
    cause = f"{what} for {silent_s:.1f}s, its process {state}: {event.detail}"
    new = replace(record, phase=Phase.DEAD, since=now, cause=cause)
    return new, transition(event.name, record, new, cause)


def _on_inspected_starting(record: ServiceRecord, event: Inspected, now: float):
    """Only a frozen start is dead here: not running yet (a container being created) or
    unknown, the start deadline still decides; not a start miss (the deadline is not doubled)."""
    if record.in_flight or record.inspected_silence != event.silent_since or (
        event.frozen is not True
    ):
        return None, []  # another restart since, or not frozen
    after = "its restart" if record.phase is Phase.STARTING else "this node learned of it"
    cause = f"frozen {now - record.since:.1f}s after {after}, before its first sign of life: " \
        f"{event.detail}"
    new = replace(record, phase=Phase.DEAD, since=now, cause=cause)
    return new, transition(event.name, record, new, cause)


def _on_restart_done(
    config: SupervisionConfig, record: ServiceRecord | None, event: RestartDone, now: float
):
    if record is None or not record.in_flight:
        return None, []
    if record.phase is not Phase.STARTING:
        return replace(record, in_flight=False), []  # already up (or gone) again
    if event.ok:
        return replace(record, in_flight=False, since=now), [ShareState()]
    retry_s = max(backoff_s(config, record.flaps), config.backoff_base_s)
    cause = f"restart failed: {event.detail}"
    new = replace(record, phase=Phase.DEAD, since=now, in_flight=False, cause=cause,
                  not_before=max(record.not_before, now + retry_s))
    return new, transition(event.name, record, new, cause)


def _on_leadership(state: SupervisionState, event: Leadership, now: float):
    """A new leader redoes the restarts its predecessor decided but never confirmed (it may
    have died in the middle): the restarter kills whatever instance exists and starts anew."""
    state = replace(state, is_leader=event.is_leader)
    if not event.is_leader:
        return state, []
    records = dict(state.records)
    actions: list[Action] = []
    for name, record in sorted(records.items()):
        if record.phase is Phase.STARTING and record.peer_in_flight:
            cause = "a restart the previous leader decided was never confirmed"
            records[name] = replace(record, phase=Phase.DEAD, since=now, cause=cause,
                                    peer_in_flight=False)
            actions += transition(name, record, records[name], cause)
    return replace(state, records=records), actions


def _on_expected(state: SupervisionState, event: Expected, now: float):
    """Unseen services the restarter lists become due; unlisted ones (ended on purpose, or
    only restored from a checkpoint) stay dormant, keeping their restart bookkeeping.

    A STARTING service listed as stopped by a listing begun after its restart completed (with
    the tolerance of a peer's view of that moment) died
    before its first heartbeat or answer (killed again while a JVM was starting): it is dead
    now, not at its start deadline (60 s for a JVM). Not while a restart is in flight (the
    listing may predate the start). An UNKNOWN one listed as stopped by a listing begun after
    this node learned of it is dead now too: `stopped` means it ran and is gone (an exited
    container, a spawned process's dead pid; never one created or registered but not yet
    started), and a checker that was itself restarted during start-up must not wait a JVM's
    start deadline to restart a worker killed before it came up."""
    records = {
        name: replace(record, expected=name in event.names)
        if record.phase is Phase.UNKNOWN else record
        for name, record in state.records.items()
    }
    actions: list[Action] = []
    for name in sorted(event.stopped & event.names):
        record = records.get(name)
        if record is None or record.since + SAME_RESTART_TOLERANCE_S >= event.observed_at:
            continue
        if (record.phase is Phase.STARTING and not record.in_flight
                and not record.peer_in_flight):
            cause = "not running (exited) before its first heartbeat or answer"
        elif record.phase is Phase.UNKNOWN:
            cause = "not running (exited), never seen by this node"
        else:
            continue
        records[name] = replace(record, phase=Phase.DEAD, since=now, cause=cause)
        actions += transition(name, record, records[name], cause)
    for name in sorted(event.names):
        if name != state.config.self_name and name not in records and (
            len(records) < SERVICES_MAX
        ):
            records[name] = ServiceRecord(Phase.UNKNOWN, since=now, expected=True)
    return replace(state, records=records), actions


# --- time passing -------------------------------------------------------------------------------
def _on_tick(state: SupervisionState, now: float) -> tuple[SupervisionState, list[Action]]:
    actions: list[Action] = []
    if state.last_tick_at is not None and now - state.last_tick_at > state.config.stall_gap_s:
        gap_s = now - state.last_tick_at
        state = _shift(state, gap_s)
        actions.append(Stalled(gap_s))
    config = state.config
    records = dict(state.records)
    restarted = False
    for name in sorted(records):
        if name == config.self_name:
            continue
        record, record_actions = _expire(config, name, records[name], now, state.is_leader)
        if record.phase is Phase.DEAD and state.is_leader and now >= record.not_before:
            record, restart = _restart(config, name, record, now)
            record_actions.append(restart)
            restarted = True
        records[name] = record
        actions += record_actions
    if restarted:
        actions.append(ShareState())
    return replace(state, records=records, last_tick_at=now), actions


def _expire(config: SupervisionConfig, name: str, record: ServiceRecord, now: float,
            is_leader: bool):
    if record.phase is Phase.UP and record.seen_in_restart:
        assert record.last_seen_at is not None
        silent_s = now - record.last_seen_at
        if silent_s > config.heartbeat_timeout_s:
            return _replaced_after_all(name, record, now, f"no heartbeat for {silent_s:.1f}s")
    if record.phase is Phase.UP and config.hung_timeout_s is not None:
        return _expire_silent(config, name, record, now, is_leader)
    cause = None
    start_misses = record.start_misses
    if record.phase is Phase.STARTING and not record.in_flight:
        deadline_s = config.start_deadline_for(name, record.start_misses)
        if now - record.since > deadline_s:
            cause = (f"no sign of life {now - record.since:.1f}s after its restart "
                     f"(start deadline {deadline_s:g}s)")
            start_misses += 1
        elif config.hung_timeout_s is not None and is_leader:
            return _inspect_starting(config, name, record, now)
    elif record.phase is Phase.UP:
        assert record.last_seen_at is not None
        silent_s = now - record.last_seen_at
        if silent_s > config.heartbeat_timeout_s:
            what = "no heartbeat" + (f" from {record.instance}" if record.instance else "")
            cause = f"{what} for {silent_s:.1f}s (timeout {config.heartbeat_timeout_s:g}s)"
    elif record.phase is Phase.UNKNOWN and record.expected:
        deadline_s = config.start_deadline_for(name, record.start_misses)
        if now - record.since > deadline_s:
            cause = (f"never seen by this node for {now - record.since:.1f}s "
                     f"(start deadline {deadline_s:g}s)")
            start_misses += 1
        elif config.hung_timeout_s is not None and is_leader:
            return _inspect_starting(config, name, record, now)
    if cause is None:
        return record, []
    new = replace(record, phase=Phase.DEAD, since=now, cause=cause, start_misses=start_misses)
    return new, transition(name, record, new, cause)


def _expire_silent(config: SupervisionConfig, name: str, record: ServiceRecord, now: float,
                   is_leader: bool):
    """An UP service with inspection on: silent past the heartbeat timeout, the leader asks
    once per silence whether it is frozen; dead when the answer says so (Inspected), when no
    answer came within another heartbeat timeout, or when silent `hung_timeout_s` in any case
    (a running process that says nothing that long is hung). A follower only waits."""
    assert record.last_seen_at is not None and config.hung_timeout_s is not None
    silent_s = now - record.last_seen_at
    if silent_s <= config.heartbeat_timeout_s:
        return record, []
    what = "no heartbeat" + (f" from {record.instance}" if record.instance else "")
    cause = None
    if silent_s > config.hung_timeout_s:
        runs = " while its process runs" if record.runs_while_silent else ""
        cause = f"{what} for {silent_s:.1f}s{runs} (hung timeout {config.hung_timeout_s:g}s)"
    elif not is_leader or record.runs_while_silent:
        return record, []
    elif record.inspected_silence != record.last_seen_at:
        asked = replace(record, inspected_silence=record.last_seen_at, inspect_asked_at=now)
        return asked, [Inspect(name, record.last_seen_at)]
    elif record.inspect_asked_at is not None and (
        now - record.inspect_asked_at > config.heartbeat_timeout_s
    ):
        cause = (f"{what} for {silent_s:.1f}s, and no answer whether its process runs "
                 f"(timeout {config.heartbeat_timeout_s:g}s)")
    if cause is None:
        return record, []
    new = replace(record, phase=Phase.DEAD, since=now, cause=cause)
    return new, transition(name, record, new, cause)


def _inspect_starting(config: SupervisionConfig, name: str, record: ServiceRecord, now: float):
    """A STARTING service (or an expected UNKNOWN one: starting with the deployment, as far as
    this node knows) before its deadline, inspection on: the leader asks now and then whether
    its process is frozen, so that a start SIGSTOPped (or paused) is restarted
    then, not at a JVM's start deadline minutes later. Running or unknown: it waits on. Asked
    every half hung timeout (10 s by default), not every heartbeat timeout: a deployment
    starts a dozen services at once, on a machine busy starting them."""
    assert config.hung_timeout_s is not None
    interval_s = config.hung_timeout_s / 2
    if now - record.since <= interval_s:
        return record, []
    if record.inspected_silence == record.since and record.inspect_asked_at is not None and (
        now - record.inspect_asked_at <= interval_s
    ):
        return record, []
    asked = replace(record, inspected_silence=record.since, inspect_asked_at=now)
    return asked, [Inspect(name, record.since)]


def _restart(config: SupervisionConfig, name: str, record: ServiceRecord, now: float):
    flapping = record.last_restart_at is not None and (
        now - record.last_restart_at < config.stable_after_s
    )
    flaps = record.flaps + 1 if flapping else 0
    wait_s = backoff_s(config, flaps)
    new = replace(
        record,
        phase=Phase.STARTING,
        since=now,
        restart_count=record.restart_count + 1,
        flaps=flaps,
        last_restart_at=now,
        not_before=now + wait_s,
        in_flight=True,
        replaced_instance=record.instance,
        seen_here=False,
    )
    return new, Restart(name, record.cause, new.restart_count, wait_s)


def _shift(state: SupervisionState, gap_s: float) -> SupervisionState:
    def later(at: float | None) -> float | None:
        return None if at is None else at + gap_s

    records = {
        name: replace(
            record,
            since=record.since + gap_s,
            last_seen_at=later(record.last_seen_at),
            last_restart_at=later(record.last_restart_at),
            not_before=record.not_before + gap_s,
            inspected_silence=later(record.inspected_silence),
            inspect_asked_at=later(record.inspect_asked_at),
        )
        for name, record in state.records.items()
    }
    return replace(state, records=records)
