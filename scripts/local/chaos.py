"""The killer's chaos loop (scripts/killer.py) on a thread of run_local: every interval a live
process of the run is SIGKILLed or paused (any broker, the health-checker leader and the clients
included), never the last live health checker (nothing would be left to restart anything).
Victims are random, or the service kinds in turn (`round-robin`: the client and the leader
first, so that even a short run hits both)."""

from __future__ import annotations

import random
import sys

from scripts import killer
from scripts.local import console
from scripts.local.layout import CHECKER_PREFIX
from scripts.victims import PICKERS


class _PrefixedLines:
    """A text stream that prints each line with a prefix (the chaos loop's output)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                console.say(f"{self.prefix} {line}")
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()


class ChaosThread:
    """`killer.ChaosThread` sparing the last live health checker, its lines prefixed with
    `[chaos]`; `stop()` ends it at its next wake-up."""

    def __init__(self, backend: killer.Backend, interval_s: float, duration_s: float,
                 seed: int | None, pause_ratio: float = 0.0, victims: str = "random") -> None:
        spared = killer.SpareLastBackend(backend, [CHECKER_PREFIX])
        self._thread = killer.ChaosThread(
            spared, interval_s, duration_s, random.Random(seed), _PrefixedLines("[chaos]"),
            pause_ratio=pause_ratio, picker=PICKERS[victims](), leader=spared.leader)

    @property
    def faults(self) -> list[killer.Fault]:
        return self._thread.faults

    @property
    def thread(self):
        return self._thread.thread

    def start(self) -> ChaosThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()
