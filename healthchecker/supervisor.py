"""Restart policy, as pure functions of (state, sightings, now): who to restart, and when.

Rules:
- Only the leader restarts, and a newly elected leader first waits a full `restart_grace_s`
  (its liveness table may be empty or stale; it must not restart everything at once).
- A service silent for more than `heartbeat_timeout_s` (since its last sighting, or since its
  last restart, whichever is later) is restarted, then left alone for `restart_grace_s`.
- A service restarted again less than `stable_after_s` after its previous restart is flapping:
  each such restart adds a back-off of `backoff_base_s * 2**(flaps-1)`, capped at
  `backoff_max_s`, on top of the grace period. Staying up for `stable_after_s` resets it.
- A service that said goodbye (stopped on purpose) is not restarted.

`SupervisorState` is immutable; `decide` returns the new state and the `RestartDecision`s the
caller must carry out (and log). Restart counts and back-off survive a health-checker restart
through `to_checkpoint` / `from_checkpoint` (the caller stores them with `common.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from healthchecker.monitor import SOURCE_PROBE, Sighting

CHECKPOINT_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    self_name: str  # never restart ourselves: we are obviously running
    heartbeat_timeout_s: float = 3.0
    restart_grace_s: float = 5.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    stable_after_s: float = 30.0

    def __post_init__(self) -> None:
        assert self.heartbeat_timeout_s > 0 and self.restart_grace_s >= 0
        assert 0 < self.backoff_base_s <= self.backoff_max_s and self.stable_after_s > 0


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    restart_count: int = 0
    flaps: int = 0  # consecutive restarts less than `stable_after_s` apart
    last_restart_at: float | None = None
    not_before: float = 0.0  # no restart before this time (grace + back-off)
    last_cause: str = ""


_NEVER_RESTARTED = ServiceRecord()


class SupervisorCheckpointError(ValueError):
    """A supervisor checkpoint whose format or fields do not parse."""


@dataclass(frozen=True, slots=True)
class SupervisorState:
    records: Mapping[str, ServiceRecord] = field(default_factory=dict)
    leader_since: float | None = None  # None while not the leader


@dataclass(frozen=True, slots=True)
class RestartDecision:
    name: str
    cause: str
    attempt: int  # 1 for the first restart of this service
    backoff_s: float  # extra wait imposed before the next restart of it


def set_leadership(state: SupervisorState, is_leader: bool, now: float) -> SupervisorState:
    if is_leader and state.leader_since is None:
        return replace(state, leader_since=now)
    if not is_leader and state.leader_since is not None:
        return replace(state, leader_since=None)
    return state


def backoff_s(config: SupervisorConfig, flaps: int) -> float:
    if flaps <= 0:
        return 0.0
    return min(config.backoff_base_s * 2.0 ** (flaps - 1), config.backoff_max_s)


def decide(
    state: SupervisorState,
    config: SupervisorConfig,
    sightings: Mapping[str, Sighting],
    now: float,
    expected: Iterable[str] = (),
) -> tuple[SupervisorState, list[RestartDecision]]:
    """Which services to restart now; `expected` names services the restarter knows about
    (so one that died while this node was down is not forgotten)."""
    if state.leader_since is None or now < state.leader_since + config.restart_grace_s:
        return state, []
    records = dict(state.records)
    decisions: list[RestartDecision] = []
    for name in sorted(set(sightings) | set(expected)):
        if name == config.self_name:
            continue
        cause = _silence_cause(config, sightings.get(name), records.get(name), state, now)
        if cause is None or now < records.get(name, _NEVER_RESTARTED).not_before:
            continue
        record = records.get(name, _NEVER_RESTARTED)
        records[name], decision = _restart(config, name, record, cause, now)
        decisions.append(decision)
    return replace(state, records=records), decisions


def _silence_cause(
    config: SupervisorConfig,
    sighting: Sighting | None,
    record: ServiceRecord | None,
    state: SupervisorState,
    now: float,
) -> str | None:
    if sighting is not None and sighting.departed:
        return None
    if sighting is None:
        alive_at, what = state.leader_since, "never seen since this node leads"
    elif sighting.last_seen_at is None:
        alive_at, what = sighting.first_known_at, "probe never answered"
    else:
        alive_at = sighting.last_seen_at
        what = "probe failing" if sighting.source == SOURCE_PROBE else "no heartbeat"
        if sighting.instance:
            what += f" from {sighting.instance}"
    assert alive_at is not None
    if record is not None and record.last_restart_at is not None:
        alive_at = max(alive_at, record.last_restart_at)
    silent_s = now - alive_at
    if silent_s <= config.heartbeat_timeout_s:
        return None
    return f"{what} for {silent_s:.1f}s (timeout {config.heartbeat_timeout_s:g}s)"


def _restart(
    config: SupervisorConfig, name: str, record: ServiceRecord, cause: str, now: float
) -> tuple[ServiceRecord, RestartDecision]:
    flapping = record.last_restart_at is not None and (
        now - record.last_restart_at < config.stable_after_s
    )
    flaps = record.flaps + 1 if flapping else 0
    wait_s = backoff_s(config, flaps)
    new_record = ServiceRecord(
        restart_count=record.restart_count + 1,
        flaps=flaps,
        last_restart_at=now,
        not_before=now + config.restart_grace_s + wait_s,
        last_cause=cause,
    )
    return new_record, RestartDecision(name, cause, new_record.restart_count, wait_s)


def to_checkpoint(state: SupervisorState, now: float, wall_now: float) -> dict:
    """Restart counts and back-off as JSON; monotonic times become wall-clock times."""

    def wall(at: float | None) -> float | None:
        return None if at is None else wall_now - (now - at)

    return {
        "format": CHECKPOINT_FORMAT,
        "services": {
            name: {
                "restart_count": record.restart_count,
                "flaps": record.flaps,
                "last_restart_wall": wall(record.last_restart_at),
                "not_before_wall": wall(record.not_before),
                "last_cause": record.last_cause,
            }
            for name, record in sorted(state.records.items())
        },
    }


def from_checkpoint(data: Mapping, now: float, wall_now: float) -> SupervisorState:
    """The inverse of `to_checkpoint` (leadership is never restored: it is re-elected)."""
    if not isinstance(data, Mapping) or data.get("format") != CHECKPOINT_FORMAT:
        raise SupervisorCheckpointError(f"unknown supervisor checkpoint format in {data!r:.80}")

    def monotonic(at: float | None) -> float | None:
        return None if at is None else now - (wall_now - float(at))

    try:
        records = _records_from_json(data["services"], monotonic)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SupervisorCheckpointError(f"bad supervisor checkpoint: {error!r}") from error
    return SupervisorState(records=records)


def _records_from_json(services: Mapping, monotonic) -> dict[str, ServiceRecord]:
    return {
        name: ServiceRecord(
            restart_count=int(fields["restart_count"]),
            flaps=int(fields["flaps"]),
            last_restart_at=monotonic(fields["last_restart_wall"]),
            not_before=monotonic(fields["not_before_wall"]) or 0.0,
            last_cause=str(fields["last_cause"]),
        )
        for name, fields in services.items()
    }
