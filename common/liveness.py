"""Whether a service's own main loop still makes progress: what `/healthz` answers.

A live HTTP thread proves little: a service whose replication loop (or election loop, or
session loop) deadlocked still answers `/metrics`. So each loop that does the service's work
holds a `Liveness` and calls `touch()` once per turn; the `/healthz` handler
(common/metrics_http.py) asks a `HealthCheck` whether every such loop touched within
`stale_after_s`. A loop's turn must therefore be bounded well below that (every loop this
checks waits at most a second or two per turn). A SIGSTOPped process answers nothing at all:
a probe with a deadline (common/probe.py) sees that one.

Thread-safety: `touch()` is one float store (atomic under the GIL) by the loop's thread; any
thread reads the age. The clock is passed in (tests step it by hand: no sleeping).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

STALE_AFTER_S_DEFAULT = 10.0
HEALTHZ_STALE_FLAG = "--healthz-stale-s"

Clock = Callable[[], float]


class Liveness:
    """When one loop last showed progress. Starts as touched at creation: a loop that never
    runs its first turn goes stale after `stale_after_s` like one that stopped."""

    def __init__(self, name: str, clock: Clock = time.monotonic) -> None:
        self.name = name  # what the reason line calls the loop (e.g. its thread's name)
        self._clock = clock
        self._touched_s = clock()

    def touch(self) -> None:
        self._touched_s = self._clock()

    def age_s(self) -> float:
        return max(self._clock() - self._touched_s, 0.0)


class HealthCheck:
    """Healthy while every loop of `loops()` touched within `stale_after_s` and `ready()` (a
    service's own condition, e.g. a first poll done) names no problem.

    `loops` is a callable so a service whose loops appear after the endpoint starts (or come
    and go) is read at each request."""

    def __init__(self, loops: Callable[[], Iterable[Liveness]],
                 stale_after_s: float = STALE_AFTER_S_DEFAULT,
                 ready: Callable[[], str | None] = lambda: None) -> None:
        self._loops = loops
        self.stale_after_s = stale_after_s
        self._ready = ready

    @classmethod
    def of(cls, *loops: Liveness, stale_after_s: float = STALE_AFTER_S_DEFAULT) -> HealthCheck:
        return cls(lambda: loops, stale_after_s)

    def problem(self) -> str | None:
        """None when healthy, else one line saying why not."""
        for loop in self._loops():
            age_s = loop.age_s()
            if age_s > self.stale_after_s:
                return (f"{loop.name} made no progress for {age_s:.1f} s "
                        f"(stale after {self.stale_after_s:g} s)")
        return self._ready()
