"""What happened lately, as one health checker saw it: deaths, restarts, heals and leader
changes, with wall-clock times, for the status page's timeline (services/status).

The log lines say the same (`RESTART`, `PHASE`, `ROLE`, ...), but the status page must not
parse logs of containers it cannot read. The journal is bounded (`events_max`, oldest dropped
first) and keeps, per service, its last heal (not dropped with the events: a service that
healed long ago still shows when). Thread-safe (one lock): the supervision, restarter and
election threads record; the status endpoint's threads read snapshots.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from healthchecker.supervision import Phase, Transition

EVENTS_MAX_DEFAULT = 256
SERVICES_MAX = 1024  # as many as the supervision tracks
DETAIL_CHARS_MAX = 200

# Event kinds (the status page's timeline shows them by these names).
KIND_DEATH = "death"  # this checker saw a service die (detail: why)
KIND_RESTART = "restart"  # the leader decided a restart (detail: attempt and cause)
KIND_RESTARTED = "restarted"  # the restart was carried out (detail: ok or the error)
KIND_HEALED = "healed"  # first sign of life after a restart (detail: seconds since the death)
KIND_ROLE = "role"  # this checker's election role changed (detail: role and leader)
KINDS = (KIND_DEATH, KIND_RESTART, KIND_RESTARTED, KIND_HEALED, KIND_ROLE)


@dataclass(frozen=True, slots=True)
class JournalEvent:
    at_s: float  # wall clock (epoch seconds): the page merges several checkers' journals
    kind: str
    service: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Heal:
    at_s: float  # wall clock of the first sign of life
    heal_s: float  # from the death this checker saw to that sign of life


class EventJournal:
    def __init__(self, events_max: int = EVENTS_MAX_DEFAULT,
                 wall_clock: Callable[[], float] = time.time) -> None:
        assert events_max >= 1
        self._lock = threading.Lock()
        self._events: deque[JournalEvent] = deque(maxlen=events_max)
        self._heals: dict[str, Heal] = {}
        self._wall_clock = wall_clock

    def record(self, kind: str, service: str, detail: str = "") -> None:
        assert kind in KINDS, kind
        event = JournalEvent(self._wall_clock(), kind, service, detail[:DETAIL_CHARS_MAX])
        with self._lock:
            self._events.append(event)

    def record_transition(self, transition: Transition, heal_s: float | None) -> None:
        """A supervision phase change; `heal_s` when it ended a restart (NodeMetrics)."""
        if transition.phase is Phase.DEAD:
            self.record(KIND_DEATH, transition.name, transition.reason)
        elif heal_s is not None:
            self.record(KIND_HEALED, transition.name, f"{heal_s:.2f} s after its death")
            with self._lock:
                if transition.name in self._heals or len(self._heals) < SERVICES_MAX:
                    self._heals[transition.name] = Heal(self._wall_clock(), heal_s)

    def events(self) -> list[JournalEvent]:
        """Oldest first."""
        with self._lock:
            return list(self._events)

    def heals(self) -> dict[str, Heal]:
        with self._lock:
            return dict(self._heals)
