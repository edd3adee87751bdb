"""Supervision as a pure state machine: `step(state, event, now) -> (state, actions)`.

No sockets, threads or clocks here: the heartbeat server and the probes deliver `Seen`,
`Departed` and `Lost` events, a timer delivers `Tick`s, the election delivers `Leadership`, the
restarter reports `RestartDone`, peers deliver `PeerState`; the caller carries out the returned
actions (`Restart`, `ShareState`) and logs the others. `now` is seconds on any monotonic clock.

Phases of one service (every checker tracks them all the time, leader or not):

    UNKNOWN   known (listed by the restarter, restored from a checkpoint, or shared by a peer)
              but never seen by this node; it may be starting, so it is dead when the restarter
              expects it to run and it is still unseen at its start deadline, counted from when
              this node learned of it (peers' states usually tell sooner)
    STARTING  (re)started at `since`; UP at its first heartbeat or answered probe; DEAD when it
              misses its start deadline (per service kind, `start_deadline_for`; every missed
              deadline doubles the next one, up to `start_deadline_growth_max` times)
    UP        seen; DEAD when silent for more than `heartbeat_timeout_s`, or at once when its
              heartbeat connection is closed without a goodbye (`Lost`: the process is gone)
    DEAD      restart due: the leader restarts it as soon as its back-off allows (`not_before`)
    DEPARTED  said goodbye (stopped on purpose): left alone until seen again

Only the leader restarts, and it restarts at once: there is no grace period, neither after a
restart (STARTING covers that) nor after an election (every node already knows who is dead,
and the leader shares its restart bookkeeping with `to_shared`, merged by `PeerState`). A
restart the old leader decided but had not confirmed done when it last spoke may have died
with it: a new leader redoes it at once (`Leadership`).

Back-off: a restart less than `stable_after_s` after the previous one is a flap; the restart
after `n` consecutive flaps waits `backoff_base_s * 2**(n-1)` (capped at `backoff_max_s`) after
the previous restart. The first restart, and the first one after a stable run, wait nothing.

A tick that comes more than `stall_gap_s` after the previous one means this node itself was
frozen (SIGSTOP, starved): every clock in the table is moved forward by the gap, so the node
does not blame the services for its own silence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from fnmatch import fnmatchcase

from healthchecker.errors import HealthCheckerConfigError, require_positive_s

DEFAULT_START_DEADLINES: tuple[tuple[str, float], ...] = (
    ("spark-*", 60.0),  # JVMs: seconds to open a port on two busy cores
    ("query-service*", 60.0),  # a Python driver that starts a JVM
)
SERVICES_MAX = 1024
SHARED_SERVICES_MAX = 48  # entries in one state message (bounded packet)
NAME_CHARS_MAX = 128
SHARED_AGE_S_MAX = 1e7  # ~115 days: ages above this are malformed
SHARED_COUNT_MAX = 10**9
SAME_RESTART_TOLERANCE_S = 0.5  # two nodes' views of one restart differ by the packet delay
CHECKPOINT_FORMAT = 2
_NEVER = -math.inf


class SupervisionConfigError(HealthCheckerConfigError):
    """A supervision setting out of range or inconsistent."""


class SharedStateError(ValueError):
    """A shared supervision state (from a peer) that does not parse or breaks its bounds."""


class SupervisorCheckpointError(ValueError):
    """A supervision checkpoint whose format or fields do not parse."""


class Phase(StrEnum):
    UNKNOWN = "unknown"
    STARTING = "starting"
    UP = "up"
    DEAD = "dead"
    DEPARTED = "departed"


@dataclass(frozen=True, slots=True)
class SupervisionConfig:
    self_name: str  # never supervise ourselves: we are obviously running
    heartbeat_timeout_s: float = 3.0
    start_deadline_s: float = 10.0  # services that match no pattern of `start_deadlines`
    start_deadlines: tuple[tuple[str, float], ...] = DEFAULT_START_DEADLINES  # first match
    start_deadline_growth_max: float = 4.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    stable_after_s: float = 10.0  # a service that ran this long was not crash-looping
    stall_gap_s: float = 1.0

    def __post_init__(self) -> None:
        error = SupervisionConfigError
        if not isinstance(self.self_name, str) or not 0 < len(self.self_name) <= NAME_CHARS_MAX:
            raise error(f"self_name must hold 1..{NAME_CHARS_MAX} characters")
        for name in ("heartbeat_timeout_s", "start_deadline_s", "backoff_base_s",
                     "backoff_max_s", "stable_after_s", "stall_gap_s"):
            require_positive_s(error, name, getattr(self, name))
        if self.backoff_base_s > self.backoff_max_s:
            raise error(f"backoff_base_s ({self.backoff_base_s:g}) must not exceed "
                        f"backoff_max_s ({self.backoff_max_s:g})")
        if not (isinstance(self.start_deadline_growth_max, int | float)
                and 1 <= self.start_deadline_growth_max <= 64):
            raise error(f"start_deadline_growth_max must be within 1..64, got "
                        f"{self.start_deadline_growth_max!r}")
        for pattern, seconds in self.start_deadlines:
            if not isinstance(pattern, str) or not pattern:
                raise error(f"a start deadline needs a service name pattern, got {pattern!r}")
            require_positive_s(error, f"start deadline of {pattern!r}", seconds)

    def start_deadline_for(self, name: str, misses: int = 0) -> float:
        """The start deadline of `name`'s kind, doubled per missed deadline (capped)."""
        base_s = next(
            (seconds for pattern, seconds in self.start_deadlines if fnmatchcase(name, pattern)),
            self.start_deadline_s,
        )
        return base_s * min(2.0 ** min(misses, 16), self.start_deadline_growth_max)


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    phase: Phase
    since: float  # when the phase began (STARTING: when the restart completed)
    last_seen_at: float | None = None
    instance: str = ""  # of the last heartbeat ("" for probes)
    restart_count: int = 0
    flaps: int = 0  # consecutive restarts less than `stable_after_s` apart
    start_misses: int = 0  # consecutive missed start deadlines
    last_restart_at: float | None = None
    not_before: float = _NEVER  # no restart before this (back-off)
    cause: str = ""  # why it is (or last was) dead
    in_flight: bool = False  # a Restart was emitted and its RestartDone has not come yet
    replaced_instance: str = ""  # the instance a restart replaces: its late signs are ignored
    expected: bool = False  # UNKNOWN only: the restarter lists it as one that should run
    seen_here: bool = False  # UP on this node's own evidence (not only on a peer's word)
    peer_in_flight: bool = False  # STARTING by a peer's restart that it had not confirmed yet


@dataclass(frozen=True, slots=True)
class SupervisionState:
    config: SupervisionConfig
    started_at: float
    records: Mapping[str, ServiceRecord] = field(default_factory=dict)
    is_leader: bool = False
    last_tick_at: float | None = None


def initial_state(
    config: SupervisionConfig, now: float, records: Mapping[str, ServiceRecord] | None = None
) -> SupervisionState:
    return SupervisionState(config=config, started_at=now, records=dict(records or {}))


# --- shared state (peer to peer; times as ages, so clocks need not agree) ------------------------
@dataclass(frozen=True, slots=True)
class SharedRecord:
    name: str
    phase: Phase
    since_age_s: float
    last_seen_age_s: float | None
    restart_count: int
    flaps: int
    start_misses: int
    last_restart_age_s: float | None
    backoff_left_s: float  # until the next restart is allowed (0: now)
    in_flight: bool = False  # STARTING: the restart was decided, not yet confirmed done


# --- events -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class Seen:
    """A heartbeat from `instance`, or (instance "") an answered probe."""

    name: str
    instance: str = ""


@dataclass(frozen=True, slots=True)
class Departed:
    name: str
    instance: str = ""


@dataclass(frozen=True, slots=True)
class Lost:
    """Evidence that the process is gone: its heartbeat connection closed without a goodbye."""

    name: str
    instance: str = ""
    reason: str = "heartbeat connection closed without a goodbye"


@dataclass(frozen=True, slots=True)
class Expected:
    """The services the restarter says should run (refreshed now and then), and those of
    them it knows are not running (`stopped`: exited container, no live pid), as listed from
    `observed_at` on (the caller's clock, taken before the listing began)."""

    names: frozenset[str]
    stopped: frozenset[str] = frozenset()
    observed_at: float = _NEVER


@dataclass(frozen=True, slots=True)
class Leadership:
    is_leader: bool


@dataclass(frozen=True, slots=True)
class RestartDone:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PeerState:
    sender: int
    entries: tuple[SharedRecord, ...]


Event = Tick | Seen | Departed | Lost | Expected | Leadership | RestartDone | PeerState


# --- actions ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Restart:
    name: str
    cause: str
    attempt: int  # 1 for the first restart of this service
    backoff_s: float  # how long after this restart the next one may come at the earliest


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    previous: Phase | None
    phase: Phase
    reason: str


@dataclass(frozen=True, slots=True)
class ShareState:
    """Send the state to the peers now (a restart was decided)."""


@dataclass(frozen=True, slots=True)
class Stalled:
    gap_s: float


Action = Restart | Transition | ShareState | Stalled


# --- the step -----------------------------------------------------------------------------------
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
        return _on_peer_state(state, event, now)
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
    else:
        assert isinstance(event, RestartDone), f"unknown event {event!r}"
        new, actions = _on_restart_done(state.config, record, event, now)
    if new is None or (record is None and len(state.records) >= SERVICES_MAX):
        return state, []
    return replace(state, records={**state.records, name: new}), actions


def backoff_s(config: SupervisionConfig, flaps: int) -> float:
    if flaps <= 0:
        return 0.0
    return min(config.backoff_base_s * 2.0 ** min(flaps - 1, 32), config.backoff_max_s)


def _transition(name: str, old: ServiceRecord | None, new: ServiceRecord, reason: str):
    previous = None if old is None else old.phase
    return [] if previous is new.phase else [Transition(name, previous, new.phase, reason)]


def _on_seen(record: ServiceRecord | None, event: Seen, now: float):
    if record is None:
        new = ServiceRecord(Phase.UP, since=now, last_seen_at=now, instance=event.instance,
                            seen_here=True)
        return new, _transition(event.name, None, new, "first seen")
    if record.phase is Phase.STARTING and event.instance and (
        event.instance == record.replaced_instance
    ):
        return None, []  # the replaced instance, between unpause and kill: not a sign of life
    reasons = {
        Phase.STARTING: f"first sign of life {now - record.since:.1f}s after the restart",
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
    )
    return new, _transition(event.name, record, new, reasons.get(record.phase, ""))


def _on_departed(record: ServiceRecord | None, event: Departed, now: float):
    if record is not None and record.phase is Phase.STARTING and event.instance and (
        event.instance == record.replaced_instance
    ):
        return None, []
    if record is not None and record.phase is Phase.DEPARTED:
        return None, []
    old = record or ServiceRecord(Phase.UNKNOWN, since=now)
    new = replace(old, phase=Phase.DEPARTED, since=now, last_seen_at=now,
                  instance=event.instance or old.instance, replaced_instance="")
    return new, _transition(event.name, record, new, "said goodbye (stopped on purpose)")


def _on_lost(record: ServiceRecord | None, event: Lost, now: float):
    if record is None or record.phase is not Phase.UP:
        return None, []  # only an up service can be lost; a starting one has no connection yet
    if event.instance and record.instance and event.instance != record.instance:
        return None, []  # an older instance's connection closing late
    new = replace(record, phase=Phase.DEAD, since=now, cause=event.reason)
    return new, _transition(event.name, record, new, event.reason)


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
    return new, _transition(event.name, record, new, cause)


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
            actions += _transition(name, record, records[name], cause)
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
        actions += _transition(name, record, records[name], cause)
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
        record, record_actions = _expire(config, name, records[name], now)
        if record.phase is Phase.DEAD and state.is_leader and now >= record.not_before:
            record, restart = _restart(config, name, record, now)
            record_actions.append(restart)
            restarted = True
        records[name] = record
        actions += record_actions
    if restarted:
        actions.append(ShareState())
    return replace(state, records=records, last_tick_at=now), actions


def _expire(config: SupervisionConfig, name: str, record: ServiceRecord, now: float):
    cause = None
    start_misses = record.start_misses
    if record.phase is Phase.STARTING and not record.in_flight:
        deadline_s = config.start_deadline_for(name, record.start_misses)
        if now - record.since > deadline_s:
            cause = (f"no sign of life {now - record.since:.1f}s after its restart "
                     f"(start deadline {deadline_s:g}s)")
            start_misses += 1
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
    if cause is None:
        return record, []
    new = replace(record, phase=Phase.DEAD, since=now, cause=cause, start_misses=start_misses)
    return new, _transition(name, record, new, cause)


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
        )
        for name, record in state.records.items()
    }
    return replace(state, records=records)


# --- sharing ------------------------------------------------------------------------------------
def to_shared(state: SupervisionState, now: float) -> tuple[SharedRecord, ...]:
    """This node's view, bounded to `SHARED_SERVICES_MAX` entries (starting and dead first)."""

    def age(at: float | None) -> float | None:
        return None if at is None else min(max(now - at, 0.0), SHARED_AGE_S_MAX)

    urgent = (Phase.STARTING, Phase.DEAD)
    names = sorted(state.records, key=lambda n: (state.records[n].phase not in urgent, n))
    return tuple(
        SharedRecord(
            name=name,
            phase=record.phase,
            since_age_s=age(record.since) or 0.0,
            last_seen_age_s=age(record.last_seen_at),
            restart_count=min(record.restart_count, SHARED_COUNT_MAX),
            flaps=min(record.flaps, SHARED_COUNT_MAX),
            start_misses=min(record.start_misses, SHARED_COUNT_MAX),
            last_restart_age_s=age(record.last_restart_at),
            backoff_left_s=min(max(record.not_before - now, 0.0), SHARED_AGE_S_MAX),
            in_flight=record.phase is Phase.STARTING and (
                record.in_flight or record.peer_in_flight),
        )
        for name, record in ((n, state.records[n]) for n in names[:SHARED_SERVICES_MAX])
    )


def _from_shared(entry: SharedRecord, now: float) -> ServiceRecord:
    def local(age_s: float | None) -> float | None:
        return None if age_s is None else now - age_s

    return ServiceRecord(
        phase=entry.phase,
        since=now - entry.since_age_s,
        last_seen_at=local(entry.last_seen_age_s),
        restart_count=entry.restart_count,
        flaps=entry.flaps,
        start_misses=entry.start_misses,
        last_restart_at=local(entry.last_restart_age_s),
        not_before=now + entry.backoff_left_s if entry.backoff_left_s > 0 else _NEVER,
        cause="dead according to a peer" if entry.phase is Phase.DEAD else "",
        peer_in_flight=entry.phase is Phase.STARTING and entry.in_flight,
    )


def _on_peer_state(state: SupervisionState, event: PeerState, now: float):
    records = dict(state.records)
    actions: list[Action] = []
    for entry in event.entries:
        if entry.name == state.config.self_name:
            continue
        ours = records.get(entry.name)
        if ours is None and len(records) >= SERVICES_MAX:
            continue
        merged = merge_record(ours, _from_shared(entry, now))
        records[entry.name] = merged
        if ours is not None:
            actions += _transition(entry.name, ours, merged, f"told by node {event.sender}")
    return replace(state, records=records), actions


def merge_record(ours: ServiceRecord | None, theirs: ServiceRecord) -> ServiceRecord:
    """Our record after learning a peer's view of the same service.

    The newer restart's bookkeeping wins (restart count, flaps, back-off), and its phase too
    (STARTING or DEAD) unless we saw the service alive after it. An UNKNOWN record adopts the
    peer's view; a fresher sighting refreshes an UP record. Peer evidence never revives a
    service we saw die, nor kills one we saw alive ourselves (only one we knew of by hearsay).
    """
    if ours is None:
        return theirs
    newer_restart = theirs.last_restart_at is not None and (
        ours.last_restart_at is None
        or theirs.last_restart_at > ours.last_restart_at + SAME_RESTART_TOLERANCE_S
    )
    merged = ours
    if newer_restart:
        merged = replace(
            ours,
            restart_count=max(ours.restart_count, theirs.restart_count),
            flaps=theirs.flaps,
            start_misses=theirs.start_misses,
            last_restart_at=theirs.last_restart_at,
            not_before=theirs.not_before,
            in_flight=False,
            peer_in_flight=False,
        )
    if ours.phase is Phase.UNKNOWN:
        if theirs.phase is Phase.UNKNOWN:
            return replace(merged, since=min(ours.since, theirs.since))
        return replace(
            theirs,
            restart_count=max(merged.restart_count, theirs.restart_count),
            flaps=merged.flaps,
            start_misses=merged.start_misses,
            last_restart_at=merged.last_restart_at,
            not_before=merged.not_before,
        )
    if newer_restart:
        assert theirs.last_restart_at is not None
        seen_since = ours.last_seen_at is not None and ours.last_seen_at > theirs.last_restart_at
        if not seen_since and theirs.phase in (Phase.STARTING, Phase.DEAD):
            merged = replace(merged, phase=theirs.phase, since=theirs.since,
                             cause=theirs.cause or ours.cause, replaced_instance=ours.instance,
                             peer_in_flight=theirs.peer_in_flight)
        return merged
    if ours.peer_in_flight and not theirs.peer_in_flight and theirs.phase is Phase.STARTING:
        return replace(ours, peer_in_flight=False, since=theirs.since)  # confirmed done
    if ours.phase is Phase.UP and not ours.seen_here and theirs.phase is Phase.DEAD and (
        ours.last_seen_at is None or theirs.since > ours.last_seen_at
    ):
        return replace(merged, phase=Phase.DEAD, since=theirs.since, cause=theirs.cause)
    if ours.phase is Phase.UP and theirs.last_seen_at is not None and (
        ours.last_seen_at is None or theirs.last_seen_at > ours.last_seen_at
    ):
        return replace(ours, last_seen_at=theirs.last_seen_at)
    return merged


def shared_to_json(entries: Iterable[SharedRecord]) -> list[list]:
    """Compact rows: [name, phase, since_age, seen_age, restarts, flaps, misses, restart_age,
    backoff_left, in_flight (0/1)]; ages in seconds rounded to milliseconds."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return [
        [e.name, str(e.phase), ms(e.since_age_s), ms(e.last_seen_age_s), e.restart_count,
         e.flaps, e.start_misses, ms(e.last_restart_age_s), ms(e.backoff_left_s),
         int(e.in_flight)]
        for e in entries
    ]


def shared_from_json(rows: object) -> tuple[SharedRecord, ...]:
    """The inverse of `shared_to_json`; raises `SharedStateError` on anything out of bounds."""
    if not isinstance(rows, list) or len(rows) > SHARED_SERVICES_MAX:
        raise SharedStateError(f"expected a list of at most {SHARED_SERVICES_MAX} rows")
    return tuple(_shared_row(row) for row in rows)


def _shared_row(row: object) -> SharedRecord:
    if not isinstance(row, list) or len(row) != 10:
        raise SharedStateError(f"bad row {row!r:.80}")
    name, phase, since, seen, restarts, flaps, misses, restart, backoff, in_flight = row
    if in_flight not in (0, 1) or isinstance(in_flight, bool):
        raise SharedStateError(f"bad in_flight {in_flight!r:.40}")
    if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
        raise SharedStateError(f"bad service name {name!r:.80}")
    try:
        phase = Phase(phase)
    except ValueError as error:
        raise SharedStateError(f"bad phase {phase!r:.40}") from error
    for value in (since, backoff):
        _check_age(value)
    for value in (seen, restart):
        if value is not None:
            _check_age(value)
    for value in (restarts, flaps, misses):
        if isinstance(value, bool) or not isinstance(value, int) or not (
            0 <= value <= SHARED_COUNT_MAX
        ):
            raise SharedStateError(f"bad count {value!r:.40}")
    return SharedRecord(name, phase, float(since), _float_or_none(seen), restarts, flaps, misses,
                        _float_or_none(restart), float(backoff), bool(in_flight))


def _check_age(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        0 <= value <= SHARED_AGE_S_MAX
    ):
        raise SharedStateError(f"bad age {value!r:.40}")


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


# --- checkpoints --------------------------------------------------------------------------------
def to_checkpoint(state: SupervisionState, now: float, wall_now: float) -> dict:
    """Restart counts and back-off as JSON; monotonic times become wall-clock times."""

    def wall(at: float | None) -> float | None:
        return None if at is None or not math.isfinite(at) else wall_now - (now - at)

    return {
        "format": CHECKPOINT_FORMAT,
        "services": {
            name: {
                "restart_count": record.restart_count,
                "flaps": record.flaps,
                "start_misses": record.start_misses,
                "last_restart_wall": wall(record.last_restart_at),
                "not_before_wall": wall(record.not_before),
                "last_cause": record.cause,
            }
            for name, record in sorted(state.records.items())
            if record.restart_count > 0
        },
    }


def from_checkpoint(data: Mapping, now: float, wall_now: float) -> dict[str, ServiceRecord]:
    """Records (UNKNOWN since `now`) carrying the restart bookkeeping of `to_checkpoint`; format
    1 (before start deadlines) is read too."""
    if not isinstance(data, Mapping) or data.get("format") not in (1, CHECKPOINT_FORMAT):
        raise SupervisorCheckpointError(f"unknown supervisor checkpoint format in {data!r:.80}")

    def monotonic(at: float | None) -> float | None:
        return None if at is None else now - (wall_now - float(at))

    def not_before(at: float | None) -> float:
        return _NEVER if at is None else now - (wall_now - float(at))

    try:
        return {
            str(name): ServiceRecord(
                phase=Phase.UNKNOWN,
                since=now,
                restart_count=int(fields["restart_count"]),
                flaps=int(fields["flaps"]),
                start_misses=int(fields.get("start_misses", 0)),
                last_restart_at=monotonic(fields["last_restart_wall"]),
                not_before=not_before(fields["not_before_wall"]),
                cause=str(fields["last_cause"]),
            )
            for name, fields in data["services"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SupervisorCheckpointError(f"bad supervisor checkpoint: {error!r}") from error
