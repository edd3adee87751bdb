"""The supervision table: one record per service, in one of five phases.

Owns: `Phase`, `ServiceRecord` (what this node knows of one service), `SupervisionState` (the
table, the config and whether this node leads) and the table's bound `SERVICES_MAX`.

Invariants: times are seconds on the node's monotonic clock (`NEVER` where there is none);
`last_seen_at` is set whenever the phase is UP; `in_flight` only while a Restart awaits its
RestartDone; the table holds at most `SERVICES_MAX` records, never one for the checker itself.

Threads: none; records and states are immutable, replaced on every step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from healthchecker.supervision.config import SupervisionConfig

SERVICES_MAX = 1024
SAME_RESTART_TOLERANCE_S = 0.5  # two nodes' views of one restart differ by the packet delay
NEVER = -math.inf


class Phase(StrEnum):
    UNKNOWN = "unknown"
    STARTING = "starting"
    UP = "up"
    DEAD = "dead"
    DEPARTED = "departed"



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
    not_before: float = NEVER  # no restart before this (back-off)
    cause: str = ""  # why it is (or last was) dead
    in_flight: bool = False  # a Restart was emitted and its RestartDone has not come yet
    replaced_instance: str = ""  # the instance a restart replaces: its late signs are ignored
    # UP on an instance first seen while its restart was in flight: it may be the replaced one
    # (a late start's first heartbeat), so its loss or silence is no death of its own.
    seen_in_restart: bool = False
    expected: bool = False  # UNKNOWN only: the restarter lists it as one that should run
    seen_here: bool = False  # UP on this node's own evidence (not only on a peer's word)
    peer_in_flight: bool = False  # STARTING by a peer's restart that it had not confirmed yet
    # UP but silent past the heartbeat timeout, with inspection on (config.hung_timeout_s):
    inspected_silence: float | None = None  # the last_seen_at an Inspect was emitted for
    inspect_asked_at: float | None = None  # when
    runs_while_silent: bool = False  # the answer: its process runs (slow, not frozen)


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
