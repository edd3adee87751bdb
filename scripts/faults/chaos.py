"""The faults themselves: one fault on a named service (`inject`), its one-line report, and
the chaos loop (`chaos`, or `ChaosThread` to run it beside other work): every N seconds a
SIGKILL or a pause of a victim a VictimPicker chooses among the running, non-excluded services.

Invariants: settings out of range raise ChaosConfigError before anything is hit; the loop keeps
a fixed cadence (the time a fault takes does not stretch the interval) and ends by itself after
its duration; with a seed, the k-th attempted fault is a pause or a kill whatever the victims
drew. Every fault is one `KILL ...` or `PAUSE ...` line with the wall-clock time, so a run's
log can be matched against the health checkers' `RESTART` lines.
Threads: `chaos` runs on its caller's thread; `ChaosThread` runs it on one daemon thread and
its `faults` list grows from there (append only; readers copy it).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from scripts.faults.backends import Backend, KillError
from scripts.faults.victims import AnyVictim, VictimPicker

CHAOS_DURATION_S_MAX = 24 * 3600.0
ACTION_KILL = "KILL"
ACTION_PAUSE = "PAUSE"
STOP_JOIN_S = 10.0


class ChaosConfigError(ValueError):
    """A chaos loop setting out of range."""


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds since the start of the run
    name: str
    detail: str
    action: str = ACTION_KILL  # ACTION_KILL or ACTION_PAUSE
    wall_at: float = 0.0  # epoch seconds just before the signal, to match logs and events
    leader: bool = False  # the victim was the health-checker leader when hit


def report(fault: Fault, out=None) -> None:
    leader = " leader" if fault.leader else ""
    line = (f"{time.strftime('%H:%M:%S')} {fault.action} t={fault.at_s:.1f}s "
            f"service={fault.name} {fault.detail}{leader}")
    print(line, file=out or sys.stdout, flush=True)


def is_excluded(name: str, excludes: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(prefix) for prefix in excludes)


def inject(backend: Backend, name: str, action: str, at_s: float,
           wall_clock: Callable[[], float] = time.time, leader: str | None = None) -> Fault:
    """One fault on `name`; raises KillError."""
    wall_at = wall_clock()
    hit = backend.pause if action == ACTION_PAUSE else backend.kill
    return Fault(at_s, name, hit(name), action, wall_at, name == leader)


def chaos_config_error(interval_s: float, duration_s: float, pause_ratio: float) -> str | None:
    """Why these chaos settings are unusable, or None."""
    if not interval_s > 0:
        return f"the interval must be > 0 s, got {interval_s:g}"
    if not 0 <= duration_s <= CHAOS_DURATION_S_MAX:
        return f"the duration must lie in [0, {CHAOS_DURATION_S_MAX:g}] s, got {duration_s:g}"
    if not 0 <= pause_ratio <= 1:
        return f"the pause ratio must lie in [0, 1], got {pause_ratio:g}"
    return None


def chaos(
    backend: Backend,
    interval_s: float,
    duration_s: float,
    excludes: Sequence[str] = (),
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    out=None,
    *,
    pause_ratio: float = 0.0,
    picker: VictimPicker | None = None,
    leader: Callable[[], str | None] | None = None,
    stop_when: Callable[[Sequence[Fault]], bool] | None = None,
    wall_clock: Callable[[], float] = time.time,
    faults: list[Fault] | None = None,
) -> list[Fault]:
    """Every `interval_s` for `duration_s`, one fault on a running, non-excluded service chosen
    by `picker` (default: uniformly): a pause with probability `pause_ratio`, else a SIGKILL.
    `leader()` names the health-checker leader (for the picker and the report); `stop_when`
    (given the faults so far) ends the loop early. Each fault is appended to `faults` (a new
    list by default) as it happens, and the list returned. Raises ChaosConfigError."""
    problem = chaos_config_error(interval_s, duration_s, pause_ratio)
    if problem is not None:
        raise ChaosConfigError(problem)
    out = out or sys.stdout
    rng = rng or random.Random()
    picker = picker or AnyVictim()
    # Pauses draw from their own stream, seeded from `rng`: with a seed, the k-th attempted
    # fault is a pause or a kill whatever the victims drew (their draws vary with who runs).
    pause_rng = random.Random(rng.getrandbits(64)) if pause_ratio > 0 else None
    started = clock()
    faults = [] if faults is None else faults
    rounds_max = int(duration_s // interval_s) + 1
    for index in range(rounds_max):
        elapsed_s = clock() - started
        if elapsed_s > duration_s or (stop_when is not None and stop_when(faults)):
            break
        candidates = [name for name in backend.running() if not is_excluded(name, excludes)]
        current_leader = leader() if leader is not None else None
        victim = picker.choose(candidates, current_leader, rng)
        if victim is not None:
            # No draw without pauses: a seed replays the same kills as before pauses existed.
            pause = pause_rng is not None and pause_rng.random() < pause_ratio
            action = ACTION_PAUSE if pause else ACTION_KILL
            try:
                faults.append(inject(backend, victim, action, elapsed_s, wall_clock,
                                     current_leader))
                picker.hit(victim, current_leader)
                report(faults[-1], out)
            except KillError as error:  # it died on its own between listing and the signal
                print(f"{elapsed_s:.1f}s could not {action.lower()} {victim}: {error}",
                      file=out, flush=True)
        else:
            print(f"{elapsed_s:.1f}s nothing to kill", file=out, flush=True)
        # A fixed cadence: the time a fault takes (Docker calls, the leader lookup) does not
        # stretch the interval.
        next_at_s = (index + 1) * interval_s
        if next_at_s > duration_s:
            break
        sleep(max(0.0, next_at_s - (clock() - started)))
    kills = sum(fault.action == ACTION_KILL for fault in faults)
    print(f"chaos done: {kills} kills, {len(faults) - kills} pauses in "
          f"{clock() - started:.1f}s", file=out, flush=True)
    return faults


class ChaosThread:
    """`chaos` on a thread until its duration is over or `stop()` (which ends it at its next
    wake-up instead of waiting out the interval). `faults` grows as faults happen; `finished`
    is set only when the loop returned normally (an exception in the thread, e.g. a Docker
    engine gone, leaves it unset, and its traceback on stderr)."""

    def __init__(self, backend: Backend, interval_s: float, duration_s: float,
                 rng: random.Random | None = None, out=None, *, pause_ratio: float = 0.0,
                 picker: VictimPicker | None = None,
                 leader: Callable[[], str | None] | None = None,
                 stop_when: Callable[[Sequence[Fault]], bool] | None = None) -> None:
        problem = chaos_config_error(interval_s, duration_s, pause_ratio)
        if problem is not None:
            raise ChaosConfigError(problem)
        self.stop_event = threading.Event()
        self.finished = threading.Event()
        self.faults: list[Fault] = []

        def stopped(faults: Sequence[Fault]) -> bool:
            return self.stop_event.is_set() or (stop_when is not None and stop_when(faults))

        def run() -> None:
            chaos(backend, interval_s, duration_s, rng=rng, sleep=self.stop_event.wait, out=out,
                  pause_ratio=pause_ratio, picker=picker, leader=leader, stop_when=stopped,
                  faults=self.faults)
            self.finished.set()

        self.thread = threading.Thread(target=run, name="chaos", daemon=True)

    def start(self) -> ChaosThread:
        self.thread.start()
        return self

    def stop(self, join_s: float = STOP_JOIN_S) -> None:
        self.stop_event.set()
        self.thread.join(timeout=join_s)
