"""Fault injection: SIGKILL or pause (SIGSTOP) services of this deployment, by name,
interactively, or at random.

    python -m scripts.killer --services broker-1,healthchecker-3     # these, now
    python -m scripts.killer --services query-service --pause        # hang it (SIGSTOP)
    python -m scripts.killer                                         # lists them, asks which
    python -m scripts.killer --random --interval-s 5 --duration-s 120 --exclude client
    python -m scripts.killer --random --spare-last healthchecker-    # never the last checker
    python -m scripts.killer --random --pause-ratio 0.3 --victims round-robin

`--backend docker` (default) sees only containers carrying this deployment's project label
(`com.docker.compose.project=<project>` or `flights.project=<project>`); `--backend local` sees the
processes of a local service registry (written by run_local) through their pid files.

A pause leaves the service alive but hung: it stops heartbeating and answering, and the health
checkers must replace it (kill, unpause where needed, start). Docker: `docker kill --signal
SIGSTOP` of the container's main process, or, when that process is an init (tini) that would be
the only one stopped while the service it runs goes on serving, `docker pause` (the cgroup
freezer stops every process of the container). Local: SIGSTOP to the service's process group
(a query service's Spark JVM stops with its driver, as in a container).

`--pause-ratio R` makes that fraction of the chaos loop's faults pauses; `--victims round-robin`
hits the service kinds in turn (scripts/victims.py: the client and the health-checker leader
first) instead of uniformly. Every fault is one `KILL ...` or `PAUSE ...` line on stdout with the
wall-clock time, so a chaos run's log can be matched against the health checkers' `RESTART`
lines. The chaos loop stops by itself after `--duration-s`.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from scripts.checker_logs import CHECKER_PREFIX, agreed_leader
from scripts.victims import PICKERS, AnyVictim, VictimPicker

REGISTRY_DIR_DEFAULT = os.environ.get("FLIGHTS_REGISTRY_DIR", "run/registry")
PROJECT_DEFAULT = os.environ.get("COMPOSE_PROJECT_NAME", "flights-optimizer")
ASK_ATTEMPTS_MAX = 5
CHAOS_DURATION_S_MAX = 24 * 3600.0
ACTION_KILL = "KILL"
ACTION_PAUSE = "PAUSE"
# Programs that run as a container's PID 1 and merely forward signals to the service: SIGSTOP
# stops them, not the service (a stopped process cannot forward anything).
INIT_PROGRAMS = frozenset({"tini", "docker-init", "dumb-init"})
STOP_JOIN_S = 10.0
FREEZE_ATTEMPTS = 3
FREEZE_RETRY_S = 0.5


class KillError(Exception):
    """A named service that is unknown or not running, or that the engine refused to signal."""


class ChaosConfigError(ValueError):
    """A chaos loop setting out of range."""


class Backend(Protocol):
    def running(self) -> list[str]:
        """Names of the services of this deployment that run now (paused ones included),
        sorted."""

    def kill(self, name: str) -> str:
        """SIGKILL `name`; returns what was killed (pid, container id); raises KillError."""

    def pause(self, name: str) -> str:
        """Hang `name` (module doc: SIGSTOP, or the freezer); returns what was paused and how;
        raises KillError."""

    def leader(self) -> str | None:
        """The health checker every running checker names as leader, or None."""


def stop_process_tree(pid: int) -> None:
    """SIGSTOP `pid`, with its whole group when it leads one (a local service and its
    children, as a frozen container would be)."""
    if os.getpgid(pid) == pid:
        os.killpg(pid, signal.SIGSTOP)
    else:
        os.kill(pid, signal.SIGSTOP)


class LocalBackend:
    def __init__(self, registry_dir: Path) -> None:
        from healthchecker.local_registry import LocalServiceRegistry

        self.registry = LocalServiceRegistry(registry_dir)

    def running(self) -> list[str]:
        return [name for name in self.registry.names() if self.registry.live_pid(name) is not None]

    def kill(self, name: str) -> str:
        from healthchecker.local_registry import RegistryError

        try:
            pid = self.registry.kill(name)
        except RegistryError as error:
            raise KillError(str(error)) from error
        if pid is None:
            raise KillError(f"{name} is not running")
        return f"pid={pid}"

    def pause(self, name: str) -> str:
        from healthchecker.local_registry import RegistryError

        try:
            pid = self.registry.live_pid(name)
        except RegistryError as error:
            raise KillError(str(error)) from error
        if pid is None:
            raise KillError(f"{name} is not running")
        try:
            stop_process_tree(pid)
        except ProcessLookupError as error:
            raise KillError(f"{name} (pid {pid}) ended before it could be paused") from error
        return f"pid={pid} how=SIGSTOP"

    def leader(self) -> str | None:
        from healthchecker.local_registry import RegistryError

        lines_by_checker = {}
        for name in self.registry.names():
            if not name.startswith(CHECKER_PREFIX):
                continue
            try:
                if self.registry.live_pid(name) is None:
                    continue
                log_file = self.registry.spec(name).log_file
            except RegistryError:
                return None  # a registry being rewritten: no claim either way
            try:
                lines_by_checker[name] = Path(log_file).read_text(errors="replace").splitlines()
            except OSError:
                return None  # no log (yet): it has not said whom it follows
        return agreed_leader(lines_by_checker) if lines_by_checker else None


def runs_under_init(container) -> bool:
    """Whether the container's PID 1 is an init that forwards signals (INIT_PROGRAMS, or
    Docker's own `--init`)."""
    if container.attrs.get("HostConfig", {}).get("Init"):
        return True
    entrypoint = container.attrs.get("Config", {}).get("Entrypoint") or []
    if isinstance(entrypoint, str):
        entrypoint = entrypoint.split()
    return bool(entrypoint) and Path(entrypoint[0]).name in INIT_PROGRAMS


class DockerBackend:
    def __init__(self, project: str) -> None:
        from healthchecker.restarter_docker import DockerRestarter

        self._deployment = DockerRestarter(project)

    def _running_containers(self) -> dict:
        from healthchecker.restarter_docker import service_name

        containers = self._deployment.project_containers()
        return {service_name(c): c for c in containers if c.status in ("running", "paused")}

    def _running_container(self, name: str):
        container = self._running_containers().get(name)
        if container is None:
            raise KillError(f"no running container of this deployment for {name!r}")
        return container

    def running(self) -> list[str]:
        return sorted(self._running_containers())

    def kill(self, name: str) -> str:
        from docker.errors import APIError

        container = self._running_container(name)
        try:
            container.kill()  # SIGKILL
        except APIError as error:  # it stopped between the listing and the kill
            raise KillError(f"{name}: {error}") from error
        return f"container={container.short_id}"

    def pause(self, name: str) -> str:
        from docker.errors import APIError

        container = self._running_container(name)
        try:
            if runs_under_init(container):
                self._freeze(container)
                how = "freeze"
            else:
                container.kill(signal="SIGSTOP")
                how = "SIGSTOP"
        except APIError as error:  # stopped meanwhile, already frozen, or will not freeze
            raise KillError(f"{name}: {error}") from error
        return f"container={container.short_id} how={how}"

    def _freeze(self, container) -> None:
        """`docker pause`, retried: on cgroup v1 the freezer gives up ("unable to freeze") when
        a busy container (a JVM's many threads) does not settle at once, and thaws it again; a
        moment later it usually takes. Raises the engine's last APIError."""
        from docker.errors import APIError

        for attempt in range(1, FREEZE_ATTEMPTS + 1):
            try:
                container.pause()
                return
            except APIError as error:
                if not error.is_server_error() or attempt == FREEZE_ATTEMPTS:
                    raise
            time.sleep(FREEZE_RETRY_S)

    def leader(self) -> str | None:
        from docker.errors import APIError

        from healthchecker.restarter_docker import service_name

        lines_by_checker = {}
        for container in self._running_containers().values():
            name = service_name(container)
            if not name.startswith(CHECKER_PREFIX) or container.status != "running":
                continue
            try:
                logs = container.logs()
            except APIError:
                return None  # removed meanwhile: no claim either way
            lines_by_checker[name] = logs.decode(errors="replace").splitlines()
        return agreed_leader(lines_by_checker) if lines_by_checker else None


class SpareLastBackend:
    """A backend minus, for each prefix, the last running service whose name starts with it:
    with `healthchecker-`, a chaos loop never kills the last health checker (nothing would be
    left to restart anything)."""

    def __init__(self, backend: Backend, prefixes: Sequence[str]) -> None:
        self.backend = backend
        self.prefixes = tuple(prefixes)

    def running(self) -> list[str]:
        names = self.backend.running()
        spared = set()
        for prefix in self.prefixes:
            group = [name for name in names if name.startswith(prefix)]
            if len(group) == 1:
                spared.update(group)
        return [name for name in names if name not in spared]

    def kill(self, name: str) -> str:
        return self.backend.kill(name)

    def pause(self, name: str) -> str:
        return self.backend.pause(name)

    def leader(self) -> str | None:
        return self.backend.leader()


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


def kill_named(backend: Backend, names: Sequence[str], out=None,
               action: str = ACTION_KILL) -> int:
    started = time.monotonic()
    failures = 0
    for name in names:
        try:
            report(inject(backend, name, action, time.monotonic() - started), out)
        except KillError as error:
            print(f"cannot {action.lower()} {name}: {error}", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


def parse_choice(answer: str, names: Sequence[str]) -> list[str]:
    """'1,3' or 'broker-1, 2' -> names; raises ValueError on anything unknown."""
    chosen = []
    for token in filter(None, (part.strip() for part in answer.split(","))):
        if token.isdigit() and 1 <= int(token) <= len(names):
            chosen.append(names[int(token) - 1])
        elif token in names:
            chosen.append(token)
        else:
            raise ValueError(f"{token!r} is neither a listed number nor a listed name")
    return chosen


def ask(names: Sequence[str], read: Callable[[str], str] = input, out=None) -> list[str]:
    out = out or sys.stdout
    for number, name in enumerate(names, 1):
        print(f"  {number:2d}  {name}", file=out)
    for _ in range(ASK_ATTEMPTS_MAX):
        answer = read("kill which? (numbers or names, comma separated; empty to quit) ")
        try:
            return parse_choice(answer, names)
        except ValueError as error:
            print(error, file=out)
    return []


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.killer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("docker", "local"), default="docker")
    parser.add_argument("--services", help="comma separated names to kill now")
    parser.add_argument("--pause", action="store_true",
                        help="with --services: pause (SIGSTOP) them instead of killing them")
    parser.add_argument("--random", action="store_true", help="chaos loop")
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--duration-s", type=float, default=120.0)
    parser.add_argument("--pause-ratio", type=float, default=0.0,
                        help="fraction of the chaos loop's faults that are pauses (0..1)")
    parser.add_argument("--victims", choices=sorted(PICKERS), default="random",
                        help="random: any running service; round-robin: the service kinds in "
                             "turn, the client and the health-checker leader first")
    parser.add_argument("--exclude", action="append", default=[],
                        help="name prefix the chaos loop never kills (repeat, or comma separate)")
    parser.add_argument("--seed", type=int, help="random seed for a reproducible chaos run")
    parser.add_argument("--spare-last", action="append", default=[], metavar="PREFIX",
                        help="the chaos loop never kills the last running service named "
                             "PREFIX* (e.g. healthchecker-); repeat for several")
    parser.add_argument("--project", default=PROJECT_DEFAULT, help="deployment label (docker)")
    parser.add_argument("--registry", type=Path, default=Path(REGISTRY_DIR_DEFAULT),
                        help="local service registry directory (local)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = chaos_config_error(args.interval_s, args.duration_s, args.pause_ratio)
    if problem is not None:
        parser.error(f"--interval-s/--duration-s/--pause-ratio: {problem}")
    if args.random and args.services:
        parser.error("--random and --services are exclusive")
    if args.pause and not args.services:
        parser.error("--pause goes with --services (the chaos loop takes --pause-ratio)")
    backend: Backend = (
        LocalBackend(args.registry) if args.backend == "local" else DockerBackend(args.project)
    )
    if args.random:
        excludes = [e for item in args.exclude for e in item.split(",") if e]
        if args.spare_last:
            backend = SpareLastBackend(backend, args.spare_last)
        chaos(backend, args.interval_s, args.duration_s, excludes, random.Random(args.seed),
              pause_ratio=args.pause_ratio, picker=PICKERS[args.victims](),
              leader=backend.leader)
        return 0
    if args.services:
        action = ACTION_PAUSE if args.pause else ACTION_KILL
        return kill_named(backend, [s for s in args.services.split(",") if s], action=action)
    names = backend.running()
    if not names:
        print("nothing of this deployment is running", file=sys.stderr)
        return 1
    try:
        chosen = ask(names)
    except EOFError:
        return 1
    return kill_named(backend, chosen) if chosen else 0


if __name__ == "__main__":
    sys.exit(main())
