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
hits the service kinds in turn (scripts/faults/victims.py: the client and the health-checker leader
first) instead of uniformly. Every fault is one `KILL ...` or `PAUSE ...` line on stdout with the
wall-clock time, so a chaos run's log can be matched against the health checkers' `RESTART`
lines. The chaos loop stops by itself after `--duration-s`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from scripts.faults.backends import (
    Backend,
    DockerBackend,
    KillError,
    LocalBackend,
    SpareLastBackend,
)
from scripts.faults.chaos import (
    ACTION_KILL,
    ACTION_PAUSE,
    chaos,
    chaos_config_error,
    inject,
    report,
)
from scripts.faults.victims import PICKERS

REGISTRY_DIR_DEFAULT = os.environ.get("FLIGHTS_REGISTRY_DIR", "run/registry")
PROJECT_DEFAULT = os.environ.get("COMPOSE_PROJECT_NAME", "flights-optimizer")
ASK_ATTEMPTS_MAX = 5


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
