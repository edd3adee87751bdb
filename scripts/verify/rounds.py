"""One chaos round, whatever the deployment: bring the platform up with its clients' sessions
under way (one client, or every client a Compose rendering holds, each on its input),
inject a fault every `interval_s` (nobody spared) until every session ends, wait a bounded
time for the last faults to heal, then judge each client's session against the reference and
every fault against its heal (heal.py).

The deployment-specific parts (Compose or local processes) come in a RoundDriver
(compose_round.py, local_round.py).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from oracle.session_check import SessionData, session_problems
from scripts.faults.backends import Backend, KillError
from scripts.faults.chaos import ChaosThread, Fault, chaos_config_error
from scripts.faults.victims import PICKERS
from scripts.verify.heal import Heal, Sighting, Start, heal_records

POLL_S = 1.0
CHAOS_JOIN_SLACK_S = 30.0  # a fault in flight when the loop is told to stop (docker calls)


class RoundError(Exception):
    """The round could not run to its end: the platform never came up, the session failed or
    timed out (the message carries the evidence)."""


class ChaosVerifyConfigError(ValueError):
    """A chaos_verify setting out of range."""


@dataclass(frozen=True)
class RoundOptions:
    interval_s: float = 5.0  # between two faults
    chaos_duration_s: float = 60.0  # at most this long, even if the session is not over
    pause_ratio: float = 0.3  # fraction of the faults that are pauses (SIGSTOP)
    victims: str = "random"  # scripts/faults/victims.py PICKERS
    seed: int | None = None  # per round: seed + round number
    faults_min: int = 0  # keep injecting after the session ended until this many faults
    session_timeout_s: float = 900.0  # from the first fault to the session's end
    heal_wait_s: float = 120.0  # after the chaos loop, for the last faults to heal

    def __post_init__(self) -> None:
        problem = chaos_config_error(self.interval_s, self.chaos_duration_s,
                                            self.pause_ratio)
        if problem is not None:
            raise ChaosVerifyConfigError(problem)
        if self.victims not in PICKERS:
            raise ChaosVerifyConfigError(f"victims must be one of {sorted(PICKERS)}, got "
                                         f"{self.victims!r}")
        for name in ("session_timeout_s", "heal_wait_s"):
            if not getattr(self, name) > 0:
                raise ChaosVerifyConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.faults_min < 0:
            raise ChaosVerifyConfigError(f"faults_min must be >= 0, got {self.faults_min}")


class RoundInput(Protocol):
    """What the clients of a round read: one SessionData for all (oracle/session_check.py), or
    each its own (clients_data.OwnData)."""

    directory: Path  # what the deployment reads its input from

    def of(self, client: str) -> SessionData: ...


class RoundDriver(Protocol):
    label: str  # the Compose project, or the local run's directory
    errors: tuple[type[Exception], ...]  # what its calls raise when the platform misbehaves

    @property
    def results_dirs(self) -> dict[str, Path]:
        """Each client of the round by name, with where it writes q1.csv ... q4.csv and
        summary.json (its input is the RoundInput's `of(name)`)."""

    def start(self) -> None:
        """The platform up, its client's session under way; raises RoundError."""

    def backend(self) -> Backend:
        """What the chaos loop hits: every service of this deployment."""

    def session_state(self) -> str | None:
        """None while the session runs (or its client is being healed), "completed" once it
        completed, else what went wrong."""

    def starts(self) -> list[Start]:
        """Every start of a service instance since start() ended."""

    def sightings(self) -> list[Sighting]:
        """Every SEEN / phase-up line of every health checker."""

    def restarts(self) -> list[tuple[float, str]]:
        """(when, service) of every RESTARTED line of every health checker."""

    def close(self) -> None:
        """Stops what start() set going that would outlive the round otherwise (local
        processes, event streams); a Compose deployment is its owner's to take down."""


@dataclass
class RoundResult:
    number: int
    label: str
    heals: list[Heal] = field(default_factory=list)
    restarts: int = 0
    session_s: float | None = None
    session_done_at: float | None = None  # epoch seconds the session was seen completed
    problems: list[str] = field(default_factory=list)  # differences from the reference
    error: str | None = None  # the round did not run to its end

    @property
    def exact(self) -> bool:
        return self.error is None and not self.problems

    @property
    def unhealed(self) -> list[Heal]:
        return [heal for heal in self.heals if not heal.healed]

    @property
    def passed(self) -> bool:
        return self.exact and not self.unhealed

    @property
    def kinds_hit(self) -> set[str]:
        return {heal.kind for heal in self.heals}

    @property
    def kinds_hit_in_session(self) -> set[str]:
        """The kinds hit before the session was seen completed: faults its results rode out."""
        done_at = self.session_done_at if self.session_done_at is not None else float("-inf")
        return {heal.kind for heal in self.heals if heal.fault.wall_at < done_at}


def wait_for_session(driver: RoundDriver, timeout_s: float) -> float:
    """Seconds until the session completed; RoundError when it failed or timed out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        state = driver.session_state()
        if state == "completed":
            return time.monotonic() - started
        if state is not None:
            raise RoundError(f"the session ended without completing: {state}")
        time.sleep(POLL_S)
    raise RoundError(f"the session did not complete in {timeout_s:g} s")


def current_heals(driver: RoundDriver, faults: Sequence[Fault]) -> list[Heal]:
    return heal_records(faults, driver.starts(), driver.sightings())


def wait_for_heals(driver: RoundDriver, faults: Sequence[Fault],
                   timeout_s: float) -> list[Heal]:
    """The heal records once every fault healed, or as they stand after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        heals = current_heals(driver, faults)
        if all(heal.healed for heal in heals) or time.monotonic() > deadline:
            return heals
        time.sleep(POLL_S)


def run_round(driver: RoundDriver, data: RoundInput, options: RoundOptions, number: int,
              out=None) -> RoundResult:
    """One round (module doc); never raises for what the platform did: a failure is the
    result's `error`, unhealed faults its `unhealed`."""
    out = out or sys.stdout
    result = RoundResult(number, driver.label)
    chaos = None
    chaos_started = time.time()
    try:
        driver.start()
        backend = driver.backend()
        session_over = threading.Event()
        rng = random.Random(None if options.seed is None else options.seed + number)
        chaos = ChaosThread(
            backend, options.interval_s, options.chaos_duration_s, rng, out,
            pause_ratio=options.pause_ratio, picker=PICKERS[options.victims](),
            leader=backend.leader,
            stop_when=lambda faults: session_over.is_set() and len(faults) >= options.faults_min)
        chaos_started = time.time()
        chaos.start()
        try:
            result.session_s = wait_for_session(driver, options.session_timeout_s)
            result.session_done_at = time.time()
        finally:
            session_over.set()
        # Past the session only until faults_min faults were injected (bounded by the duration).
        chaos.thread.join(options.chaos_duration_s + options.interval_s + CHAOS_JOIN_SLACK_S)
        chaos.stop()
        if not chaos.finished.is_set():
            raise RoundError("the chaos loop died or hung (its traceback, if any, is on stderr)"
                             f" after {len(chaos.faults)} faults")
        if not chaos.faults:
            raise RoundError("no fault took: a round without faults proves nothing")
        result.heals = wait_for_heals(driver, chaos.faults, options.heal_wait_s)
        result.problems = clients_problems(driver.results_dirs, data)
    except (RoundError, KillError, OSError, *driver.errors) as error:
        result.error = f"{type(error).__name__}: {error}"
    finally:
        if chaos is not None:
            chaos.stop()
            result.heals = result.heals or _heals_as_they_stand(driver, chaos.faults)
        result.restarts = sum(1 for at, _service in _restarts(driver) if at >= chaos_started)
        driver.close()
    return result


def clients_problems(results_dirs: dict[str, Path], data: RoundInput) -> list[str]:
    """Every client's differences from its reference, each named by its client when there
    are several (each client's results are its own session's, on its own input)."""
    if len(results_dirs) == 1:
        [(name, directory)] = results_dirs.items()
        return session_problems(directory, data.of(name))
    return [f"{name}: {problem}" for name, directory in results_dirs.items()
            for problem in session_problems(directory, data.of(name))]


def _heals_as_they_stand(driver: RoundDriver, faults: Sequence[Fault]) -> list[Heal]:
    try:
        return current_heals(driver, faults)
    except (RoundError, OSError, *driver.errors):
        return []  # the evidence is gone with the platform: the round's error says why


def _restarts(driver: RoundDriver) -> list[tuple[float, str]]:
    try:
        return driver.restarts()
    except (RoundError, OSError, *driver.errors):
        return []
