"""Fault injection: SIGKILL services of this deployment, by name, interactively, or at random.

    python -m scripts.killer --services broker-1,healthchecker-3     # these, now
    python -m scripts.killer                                         # lists them, asks which
    python -m scripts.killer --random --interval-s 5 --duration-s 120 --exclude client
    python -m scripts.killer --random --spare-last healthchecker-    # never the last checker

`--backend docker` (default) sees only containers carrying this deployment's project label
(`com.docker.compose.project=<project>` or `flights.project=<project>`); `--backend local` sees the
processes of a local service registry (written by run_local) through their pid files. Every kill
is one `KILL ...` line on stdout with the wall-clock time, so a chaos run's log can be matched
against the health checkers' `RESTART` lines. The chaos loop stops by itself after
`--duration-s`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

REGISTRY_DIR_DEFAULT = os.environ.get("FLIGHTS_REGISTRY_DIR", "run/registry")
PROJECT_DEFAULT = os.environ.get("COMPOSE_PROJECT_NAME", "flights-optimizer")
ASK_ATTEMPTS_MAX = 5
CHAOS_DURATION_S_MAX = 24 * 3600.0


class KillError(Exception):
    """A named service that is unknown or not running."""


class Backend(Protocol):
    def running(self) -> list[str]:
        """Names of the services of this deployment that run now, sorted."""

    def kill(self, name: str) -> str:
        """SIGKILL `name`; returns what was killed (pid, container id); raises KillError."""


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


class DockerBackend:
    def __init__(self, project: str) -> None:
        from healthchecker.restarter_docker import DockerRestarter

        self._deployment = DockerRestarter(project)

    def _running_containers(self) -> dict:
        from healthchecker.restarter_docker import service_name

        containers = self._deployment.project_containers()
        return {service_name(c): c for c in containers if c.status in ("running", "paused")}

    def running(self) -> list[str]:
        return sorted(self._running_containers())

    def kill(self, name: str) -> str:
        container = self._running_containers().get(name)
        if container is None:
            raise KillError(f"no running container of this deployment for {name!r}")
        container.kill()  # SIGKILL
        return f"container={container.short_id}"


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


@dataclass(frozen=True)
class Kill:
    at_s: float  # seconds since the start of the run
    name: str
    detail: str


def report(kill: Kill, out=None) -> None:
    line = f"{time.strftime('%H:%M:%S')} KILL t={kill.at_s:.1f}s service={kill.name} {kill.detail}"
    print(line, file=out or sys.stdout, flush=True)


def is_excluded(name: str, excludes: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(prefix) for prefix in excludes)


def kill_named(backend: Backend, names: Sequence[str], out=None) -> int:
    started = time.monotonic()
    failures = 0
    for name in names:
        try:
            report(Kill(time.monotonic() - started, name, backend.kill(name)), out)
        except KillError as error:
            print(f"cannot kill {name}: {error}", file=sys.stderr)
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


def chaos(
    backend: Backend,
    interval_s: float,
    duration_s: float,
    excludes: Sequence[str] = (),
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    out=None,
) -> list[Kill]:
    """Every `interval_s` for `duration_s`, SIGKILL one random running, non-excluded service."""
    out = out or sys.stdout
    assert interval_s > 0 and 0 <= duration_s <= CHAOS_DURATION_S_MAX
    rng = rng or random.Random()
    started = clock()
    kills: list[Kill] = []
    rounds_max = int(duration_s // interval_s) + 1
    for _ in range(rounds_max):
        elapsed_s = clock() - started
        if elapsed_s > duration_s:
            break
        victims = [name for name in backend.running() if not is_excluded(name, excludes)]
        if victims:
            victim = rng.choice(victims)
            try:
                kills.append(Kill(elapsed_s, victim, backend.kill(victim)))
                report(kills[-1], out)
            except KillError as error:  # it died on its own between listing and killing
                print(f"{elapsed_s:.1f}s could not kill {victim}: {error}", file=out, flush=True)
        else:
            print(f"{elapsed_s:.1f}s nothing to kill", file=out, flush=True)
        remaining_s = duration_s - (clock() - started)
        if remaining_s < interval_s:
            break
        sleep(interval_s)
    print(f"chaos done: {len(kills)} kills in {clock() - started:.1f}s", file=out, flush=True)
    return kills


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.killer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("docker", "local"), default="docker")
    parser.add_argument("--services", help="comma separated names to kill now")
    parser.add_argument("--random", action="store_true", help="chaos loop")
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--duration-s", type=float, default=120.0)
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
    if args.interval_s <= 0 or not 0 <= args.duration_s <= CHAOS_DURATION_S_MAX:
        parser.error(f"need --interval-s > 0 and 0 <= --duration-s <= {CHAOS_DURATION_S_MAX:g}")
    if args.random and args.services:
        parser.error("--random and --services are exclusive")
    backend: Backend = (
        LocalBackend(args.registry) if args.backend == "local" else DockerBackend(args.project)
    )
    if args.random:
        excludes = [e for item in args.exclude for e in item.split(",") if e]
        if args.spare_last:
            backend = SpareLastBackend(backend, args.spare_last)
        chaos(backend, args.interval_s, args.duration_s, excludes, random.Random(args.seed))
        return 0
    if args.services:
        return kill_named(backend, [s for s in args.services.split(",") if s])
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
