"""The killer's chaos loop (scripts/killer.py) on a thread of run_local: every interval a random
live process of the run is SIGKILLed (any broker, the health-checker leader and the clients
included), never the last live health checker (nothing would be left to restart anything)."""

from __future__ import annotations

import random
import sys
import threading
import time

from scripts import killer
from scripts.local import console
from scripts.local.layout import CHECKER_PREFIX

STOP_JOIN_S = 10.0


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
    """`killer.chaos` on a thread, never killing the last live health checker (nothing would
    be left to restart anything); `stop()` ends it at its next wake-up."""

    def __init__(self, backend: killer.Backend, interval_s: float, duration_s: float,
                 seed: int | None) -> None:
        self.stop_event = threading.Event()
        self.kills: list[killer.Kill] = []

        def clock() -> float:
            # Once stopped, time jumps past the duration: the loop ends instead of killing.
            return time.monotonic() + (duration_s + interval_s if self.stop_event.is_set() else 0)

        def run() -> None:
            spared = killer.SpareLastBackend(backend, [CHECKER_PREFIX])
            self.kills = killer.chaos(spared, interval_s,
                                      duration_s, rng=random.Random(seed), clock=clock,
                                      sleep=self.stop_event.wait, out=_PrefixedLines("[chaos]"))

        self.thread = threading.Thread(target=run, name="chaos", daemon=True)

    def start(self) -> ChaosThread:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=STOP_JOIN_S)
