"""A chaos_verify run's rounds one after the other, on one target (a fresh Compose project per
round, or run_local's processes): `run_rounds` drives them and prints each round's faults and
verdict as it ends; `write_json` keeps every fault and its heal.

Invariants: every round starts from an empty directory (a client that found an earlier run's
resume state would resume a session the fresh brokers never saw, and wait forever); a Compose
round's project is always taken down, its log tails printed first when the round failed.
Threads: the caller's (each round's chaos loop and watchers are the round drivers' own).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from oracle.session_check import SessionData
from scripts.deploy.compose_file import DEV_FILE, IMAGE_DEFAULT
from scripts.verify.rounds import RoundDriver, RoundInput, RoundOptions, RoundResult, run_round
from scripts.verify.table import fault_lines

DIAGNOSTIC_TAIL_LINES = 40


@dataclass(frozen=True)
class RoundTarget:
    """Where the rounds run: `work_dir` holds one directory per round; `local` picks
    run_local's processes over a Compose project of `compose_file` and `image`."""

    work_dir: Path
    local: bool = False
    compose_file: Path = DEV_FILE
    image: str = IMAGE_DEFAULT


def run_rounds(target: RoundTarget, data: RoundInput, options: RoundOptions,
               rounds: int) -> list[RoundResult]:
    """Rounds 1..`rounds`, each printed as it ends."""
    run_one = local_round if target.local else compose_round
    results = []
    for number in range(1, rounds + 1):
        results.append(run_one(target, data, options, number))
        print_round(results[-1])
    return results


def fresh_round_dir(work_dir: Path, number: int) -> Path:
    """The round's directory, emptied: a client that finds its resume state from an earlier run
    there resumes that session against fresh brokers that never saw it, and waits forever."""
    directory = work_dir / f"round-{number}"
    shutil.rmtree(directory, ignore_errors=True)
    return directory


def compose_round(target: RoundTarget, data: RoundInput, options: RoundOptions,
                  number: int) -> RoundResult:
    """One round on a fresh Compose project, always taken down (its log tails printed when the
    round failed)."""
    from scripts.deploy.deployment import ComposeDeployment, DeploymentError
    from scripts.verify.compose_round import ComposeRound

    deployment = ComposeDeployment(data.directory, fresh_round_dir(target.work_dir, number),
                                   compose_file=target.compose_file, image=target.image,
                                   project_prefix="flights-chaos")
    try:
        result = run_round(ComposeRound(deployment), data, options, number)
        if not result.passed:
            print(deployment.diagnostics(tail_lines=DIAGNOSTIC_TAIL_LINES), flush=True)
        return result
    finally:
        try:
            deployment.down()
        except DeploymentError as error:
            print(f"round {number}: could not take {deployment.project} down: {error}",
                  flush=True)


def local_round(target: RoundTarget, data: SessionData, options: RoundOptions,
                number: int) -> RoundResult:
    from scripts.verify.local_round import LocalRound

    driver: RoundDriver = LocalRound(fresh_round_dir(target.work_dir, number), data)
    return run_round(driver, data, options, number)


def print_round(result: RoundResult) -> None:
    verdict = "passed" if result.passed else "FAILED"
    print(f"\nround {result.number} ({result.label}): {verdict}", flush=True)
    for line in fault_lines(result.heals):
        print(line)
    if result.error:
        print(f"  error: {result.error}")
    for problem in result.problems:
        print(f"  not exact: {problem}")
    sys.stdout.flush()


def write_json(path: Path, results: list[RoundResult]) -> None:
    rounds = []
    for result in results:
        heals = [{**asdict(heal.fault), "kind": heal.kind, "running_s": heal.running_s,
                  "serving_s": heal.serving_s, "healed": heal.healed, "shared": heal.shared}
                 for heal in result.heals]
        rounds.append({"round": result.number, "label": result.label, "exact": result.exact,
                       "error": result.error, "problems": result.problems,
                       "session_s": result.session_s, "restarts": result.restarts,
                       "faults": heals})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rounds, indent=1))
