"""The killer's chaos loop (scripts/faults/chaos.py) on a thread of run_local: every interval a live
process of the run is SIGKILLed or paused (any broker, the health-checker leader and the clients
included), never the last live health checker (nothing would be left to restart anything).
Victims are random, or the service kinds in turn (`round-robin`: the client and the leader
first, so that even a short run hits both).

Once the sessions are over and the loop stopped, `wait_for_heals` waits (bounded) until every
instance hit was replaced: a run that stops its platform right after the last fault would
leave that fault's heal unproven."""

from __future__ import annotations

import random
import re
import sys
import time

from healthchecker.local_registry import LocalServiceRegistry, RegistryError
from scripts.faults import backends, chaos
from scripts.faults.victims import PICKERS
from scripts.launcher import console
from scripts.launcher.layout import CHECKER_PREFIX


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
    """`chaos.ChaosThread` sparing the last live health checker, its lines prefixed with
    `[chaos]`; `stop()` ends it at its next wake-up."""

    def __init__(self, backend: backends.Backend, interval_s: float, duration_s: float,
                 seed: int | None, pause_ratio: float = 0.0, victims: str = "random") -> None:
        spared = backends.SpareLastBackend(backend, [CHECKER_PREFIX])
        self._thread = chaos.ChaosThread(
            spared, interval_s, duration_s, random.Random(seed), _PrefixedLines("[chaos]"),
            pause_ratio=pause_ratio, picker=PICKERS[victims](), leader=spared.leader)

    @property
    def faults(self) -> list[chaos.Fault]:
        return self._thread.faults

    @property
    def thread(self):
        return self._thread.thread

    def start(self) -> ChaosThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()


FAULT_PID = re.compile(r"\bpid=(\d+)")
HEAL_POLL_S = 0.2


def fault_pid(fault: chaos.Fault) -> int | None:
    """The pid the fault hit (the local backend names it in the fault's detail)."""
    match = FAULT_PID.search(fault.detail)
    return int(match.group(1)) if match else None


def unhealed(faults: list[chaos.Fault], registry: LocalServiceRegistry) -> list[chaos.Fault]:
    """The faults whose instance was not replaced: the service's registered pid is still the
    one hit (or none is registered). A pause and a later kill of the same paused instance are
    both healed by the one replacement."""
    left = []
    for fault in faults:
        try:
            record = registry.read_pid(fault.name)
        except RegistryError:
            record = None  # being rewritten right now: not proven healed yet
        if record is None or record.pid == fault_pid(fault):
            left.append(fault)
    return left


def wait_for_heals(faults: list[chaos.Fault], registry: LocalServiceRegistry,
                   timeout_s: float) -> list[chaos.Fault]:
    """Until every fault's instance was replaced or `timeout_s` passed; the unhealed ones."""
    deadline = time.monotonic() + timeout_s
    while (left := unhealed(faults, registry)) and time.monotonic() < deadline:
        time.sleep(HEAL_POLL_S)
    return left
