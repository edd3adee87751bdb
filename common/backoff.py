"""Exponential back-off: the one rule every retry loop of the project pauses by.

Owns: the pause before retry number `attempt` (0-based): `initial_s * 2**attempt`, capped at
`max_s`. Callers keep their own loop (what they retry, what they log, how they wait: a stop
event, a fake clock) and ask this module only how long to pause; jitter, where a caller wants
it, is the caller's (`common.kaska.retry.RetryPolicy` spreads clients apart with it).

Invariants: initial_s and max_s are finite and >= 0; the pauses never decrease and never
exceed `max_s` (an `initial_s` above `max_s` pauses `max_s` every time); the doubling stops
after `DOUBLINGS_MAX` attempts, so a long run of failures never overflows a float (at 2**32
times the first pause every cap in the project is reached long before). The pauses are exact:
doubling a float is exact, so `delays_s()` yields the same numbers as the hand-written
`pause_s = min(max_s, pause_s * 2)` loops it replaced.

Threads: none; `Backoff` is immutable and pure, shareable between threads. A `delays_s()`
iterator belongs to the one loop that made it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

DOUBLINGS_MAX = 32


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float
    max_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.initial_s) and math.isfinite(self.max_s)
                and self.initial_s >= 0 and self.max_s >= 0):
            raise ValueError(f"a back-off needs finite initial_s and max_s >= 0; got "
                             f"{self.initial_s!r} and {self.max_s!r}")

    def delay_s(self, attempt: int) -> float:
        """The pause before retry number `attempt` (0-based; a negative one counts as 0)."""
        doublings = min(max(attempt, 0), DOUBLINGS_MAX)
        return min(self.max_s, self.initial_s * 2.0 ** doublings)

    def delays_s(self) -> Iterator[float]:
        """delay_s(0), delay_s(1), ... without end: one pause per failure of one loop."""
        attempt = 0
        while True:
            yield self.delay_s(attempt)
            attempt += 1
