"""Mutation testing of the modules where a bug loses or doubles data or breaks safety.

    python -m scripts.mutate [--module NAME] [--minutes M] [--fresh] [--retest] [--report] [--list]

Each module in MODULES is mutated by cosmic-ray (docs/mutation.md says why that tool) and
judged by its own narrow unit tests only, so a run fits in minutes. The session (every mutant
and its verdict) is kept in `.mutation/<name>.sqlite`: a run resumes where the last one stopped
and only re-plans the mutants when the module's source changed since (or with `--fresh`). The
verdicts are also written to `docs/mutation-ledger/<name>.jsonl`, in git: a session planned
afresh (a fresh clone) takes the verdicts the ledger holds for the same source and goes on from
there (scripts/mutation_ledger.py).
`--minutes` stops a run after that budget (the mutant in flight is rolled back); the next run
goes on from there. One test process at a time (cosmic-ray's local distributor) and one run per
checkout (a lock in .mutation/): the mapped modules import each other, so two runs at once would
let a mutant of one module fail, and so "kill", a mutant of another.

cosmic-ray edits the module's file in place while a mutant is under test. This driver keeps the
original bytes and writes them back if anything (an interrupt, a crash) leaves the file changed.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from scripts import mutation_ledger

REPO_ROOT = Path(__file__).resolve().parent.parent
SESSION_DIR = REPO_ROOT / ".mutation"
LEDGER_DIR = REPO_ROOT / "docs" / "mutation-ledger"  # the verdicts, in git (mutation_ledger.py)
PYTHON = sys.executable


@dataclass(frozen=True)
class MutatedModule:
    """A module to mutate and the tests that must kill its mutants (fast ones first: -x)."""

    path: str
    tests: tuple[str, ...]
    # A mutant whose tests outrun this counts as timed out (killed): generous, since a run on a
    # loaded machine must not pass off a slow surviving mutant as a killed one.
    timeout_s: float = 300
    # Only these functions (methods by name) of the module are mutated; () = the whole module.
    # For a large module whose one concern is mapped (node.py's commit checks).
    functions: tuple[str, ...] = ()


# In priority order: where a surviving mutant could lose or double data or break safety. The
# tests are paths or globs, the module's own test file first: a killed mutant stops at its first
# failing test (-x), so the test most likely to fail on it should run first.
MODULES: dict[str, MutatedModule] = {
    "raft": MutatedModule(
        "services/broker/replication/raft.py",
        (
            "tests/unit/broker/replication/test_raft_steps.py",
            "tests/unit/broker/replication/test_raft_learner.py",
            "tests/unit/broker/replication/test_raft_lease.py",
            "tests/unit/broker/replication/test_raft_transfer.py",
            "tests/unit/broker/replication/test_raft_sim_checks.py",
            "tests/unit/broker/replication/test_in_sync.py",
            "tests/unit/broker/replication/test_raft_property.py",
        ),
        timeout_s=600,  # the property runs: minutes on a loaded machine
    ),
    "segment": MutatedModule(
        "services/broker/storage/segment.py",
        (
            "tests/unit/broker/storage/test_log_segment.py",
            "tests/unit/broker/storage/test_partition_recovery.py",
            "tests/unit/broker/storage/test_*.py",
        ),
    ),
    "index_file": MutatedModule(
        "services/broker/storage/index_file.py",
        (
            "tests/unit/broker/storage/test_index_file.py",
            "tests/unit/broker/storage/test_offset_index.py",
            "tests/unit/broker/storage/test_time_index.py",
            "tests/unit/broker/storage/test_storage_full.py",
            "tests/unit/broker/storage/test_log_segment.py",
        ),
    ),
    "consumer": MutatedModule(
        "common/kaska/consumer.py",
        ("tests/unit/kaska/test_consumer_poll.py", "tests/unit/kaska/test_*.py"),
    ),
    "bully": MutatedModule(
        "healthchecker/bully.py",
        ("tests/unit/healthchecker/test_bully.py", "tests/unit/healthchecker/test_*.py"),
    ),
    "derived_queries": MutatedModule(
        "spark/rules/derived_queries.py", ("tests/unit/spark/rules",), timeout_s=600
    ),
    "resume": MutatedModule(
        "client/resume.py",
        ("tests/unit/client/test_client_resume.py", "tests/unit/client/test_*.py"),
    ),
    "partition": MutatedModule(
        "services/broker/cluster/partition.py",
        (
            "tests/unit/broker/cluster/test_partition.py",
            "tests/unit/broker/test_delete_records_answers.py",
            "tests/unit/broker/storage/test_partition_*.py",
            "tests/unit/broker/storage/test_producer_snapshots.py",
            "tests/unit/broker/storage/test_storage_full.py",
            "tests/unit/broker/replication/test_replication_lease.py",
        ),
    ),
    "replica_manager": MutatedModule(
        "services/broker/cluster/replica_manager.py",
        (
            "tests/unit/broker/cluster/test_replica_manager_waits.py",
            "tests/unit/broker/cluster/test_partition.py",
            "tests/unit/broker/test_topic_answers.py",
            "tests/unit/broker/test_delete_records_answers.py",
            "tests/unit/broker/replication/test_replica_fetch_incarnations.py",
            "tests/unit/broker/replication/test_topic_mirror_nodes.py",
            "tests/unit/broker/replication/test_lease_backpressure.py",
            "tests/unit/broker/replication/test_replication_*.py",
        ),
    ),
    "commit_apply": MutatedModule(
        "services/broker/replication/commit_apply.py",
        (
            "tests/unit/broker/replication/test_commit_apply.py",
            "tests/unit/broker/replication/test_replication_safety.py",
            "tests/unit/broker/replication/test_replica_objects_property.py",
        ),
    ),
    "replica_fetch": MutatedModule(
        "services/broker/handlers/replica_fetch.py",
        (
            "tests/unit/broker/replication/test_replica_fetch_answer.py",
            "tests/unit/broker/replication/test_replica_fetch_incarnations.py",
            "tests/unit/broker/replication/test_replica_objects_property.py",
        ),
    ),
    "node_commit": MutatedModule(
        "services/broker/replication/node.py",
        (
            "tests/unit/broker/replication/test_node_commit_checks.py",
            "tests/unit/broker/replication/test_replication_safety.py",
            "tests/unit/broker/replication/test_replication_fsync.py",
            "tests/unit/broker/replication/test_replica_fetch_commit_wake.py",
            "tests/unit/broker/replication/test_lease_backpressure.py",
            "tests/unit/broker/test_topic_answers.py",
            "tests/unit/broker/replication/test_replication_*.py",
            "tests/unit/broker/replication/test_replica_objects_property.py",
        ),
        # The acknowledgement path's commit checks: which entry is committed, the waits on it,
        # the fsync before the leader's own copy counts, applying and persisting commits.
        functions=(
            "entry_committed",
            "wait_changed",
            "leader_appended",
            "sync_appended",
            "_apply_commits_locked",
            "_persist_applied_locked",
            "_commit_persist_due_locked",
            "_persist_commit",
        ),
    ),
    "flight_fields": MutatedModule(
        "spark/rules/flight_fields.py",
        (
            "tests/unit/spark/rules/test_flight_fields.py",
            "tests/unit/spark/rules/test_airport_distances.py",
            "tests/unit/spark/rules/test_route_id.py",
        ),
    ),
    "peer_gate": MutatedModule(
        "services/broker/network/peer_gate.py",
        (
            "tests/unit/broker/network/test_peer_gate.py",
            "tests/unit/broker/replication/test_peer_link.py",
            "tests/unit/broker/replication/test_replication_identity.py",
        ),
    ),
    "peer_auth": MutatedModule(
        "services/broker/replication/wire/peer_auth.py",
        (
            "tests/unit/broker/replication/test_peer_auth.py",
            "tests/unit/broker/replication/test_peer_frames.py",
            "tests/unit/broker/network/test_peer_gate.py",
            "tests/unit/broker/replication/test_peer_link.py",
            "tests/unit/broker/replication/test_replication_identity.py",
            "tests/unit/broker/test_delete_records_answers.py",
        ),
    ),
    "supervision_machine": MutatedModule(
        "healthchecker/supervision/machine.py",
        ("tests/unit/healthchecker/test_supervision.py", "tests/unit/healthchecker/test_*.py"),
    ),
}


# The operator replacements kept: the ones a real bug looks like. cosmic-ray plans every ordered
# pair of its 12 binary and 8 comparison operators (`+` -> `**`, `<<`, `^`, ...; `<` -> `is`); those
# outside these lists are marked skipped by its operators filter right after planning.
# Arithmetic slips (+/-, * and /, / and //) and the set-algebra slips (| & -) stay.
KEPT_BINARY = (
    "Add_Sub",
    "Sub_Add",
    "Mul_Div",
    "Div_Mul",
    "Div_FloorDiv",
    "FloorDiv_Div",
    "BitOr_BitAnd",
    "BitAnd_BitOr",
    "Sub_BitOr",
    "BitOr_Sub",
)
# Off-by-one at a boundary, a negated or reversed test; not `==` -> `is` (equivalent on small
# ints) nor `<` -> `==`-style swaps that no slip of the hand produces.
KEPT_COMPARISON = (
    "Eq_NotEq",
    "NotEq_Eq",
    "Lt_LtE",
    "LtE_Lt",
    "Gt_GtE",
    "GtE_Gt",
    "Lt_GtE",
    "GtE_Lt",
    "Gt_LtE",
    "LtE_Gt",
    "Lt_Gt",
    "Gt_Lt",
    "LtE_GtE",
    "GtE_LtE",
    "Is_IsNot",
    "IsNot_Is",
)


def excluded_operator_patterns() -> tuple[str, ...]:
    """Regexes (matched at the start of an operator's name) of the replacements not run."""
    return (
        rf"core/ReplaceBinaryOperator_(?!(?:{'|'.join(KEPT_BINARY)})$)",
        rf"core/ReplaceComparisonOperator_(?!(?:{'|'.join(KEPT_COMPARISON)})$)",
    )


class MutationRunInProgressError(RuntimeError):
    """Another mutation run holds this checkout: two at once would judge each other's mutants."""


class DirtyModuleError(RuntimeError):
    """The module had uncommitted changes before the run: mutating it would mix them in."""


def test_paths(patterns: tuple[str, ...]) -> list[str]:
    """The test files the patterns name, in order, each once (pytest would run a repeat twice)."""
    paths: list[str] = []
    for pattern in patterns:
        if any(char in pattern for char in "*?["):
            matches = [match.relative_to(REPO_ROOT).as_posix() for match in REPO_ROOT.glob(pattern)]
        else:
            matches = [pattern]
        paths.extend(path for path in sorted(matches) if path not in paths)
    return paths


def write_config(name: str, module: MutatedModule) -> Path:
    """cosmic-ray's TOML config for one module: its file, its tests, one local worker."""
    tests = " ".join(test_paths(module.tests))
    test_command = (
        f"{PYTHON} -m pytest -x -q -p no:cacheprovider --no-header "
        f"-o addopts= --timeout={int(module.timeout_s)} {tests}"
    )
    config_path = SESSION_DIR / f"{name}.toml"
    config_path.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{module.path}"\n'
        f"timeout = {module.timeout_s}\n"
        "excluded-modules = []\n"
        f'test-command = "{test_command}"\n'
        "\n[cosmic-ray.distributor]\n"
        'name = "local"\n'
        "\n[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = {toml_strings(excluded_operator_patterns())}\n"
    )
    return config_path


def toml_strings(values: tuple[str, ...]) -> str:
    """A TOML array of literal strings (single quotes: no escapes, so regexes stay as written)."""
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


ANNOTATION_SKIP_OUTPUT = "In an annotation: unevaluated (from __future__ import annotations)"

Position = tuple[int, int]


def annotation_spans(source: str) -> list[tuple[Position, Position]]:
    """(line, column) spans of the module's annotations, when the module leaves them unevaluated.

    With `from __future__ import annotations` an annotation is a string nobody reads at run
    time, so a mutant inside one (`int | None` -> `int & None`) is equivalent by construction.
    """
    tree = ast.parse(source)
    postponed = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    if not postponed:
        return []
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            annotations.append(node.returns)
        elif isinstance(node, (ast.arg, ast.AnnAssign)) and node.annotation:
            annotations.append(node.annotation)
    return [
        ((node.lineno, node.col_offset), (node.end_lineno or node.lineno, node.end_col_offset or 0))
        for node in annotations
    ]


OUTSIDE_FUNCTIONS_OUTPUT = "Outside the module's mapped functions"


def function_spans(source: str, names: tuple[str, ...]) -> list[tuple[Position, Position]]:
    """(line, column) spans of the functions and methods named `names` (every definition of
    each name); ValueError for a name the module does not define (a stale map)."""
    tree = ast.parse(source)
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names
    ]
    missing = set(names) - {node.name for node in found}
    if missing:
        raise ValueError(f"no function named {', '.join(sorted(missing))} in the module")
    return [
        ((node.lineno, node.col_offset), (node.end_lineno or node.lineno, node.end_col_offset or 0))
        for node in found
    ]


def _within(item, spans: list[tuple[Position, Position]]) -> bool:
    return all(
        any(start <= tuple(m.start_pos) and tuple(m.end_pos) <= end for start, end in spans)
        for m in item.mutations
    )


def skip_unmapped_mutants(session_path: Path, module: MutatedModule) -> int:
    """Mark the pending mutants that only touch annotations, or (for a module mapped by
    function) lie outside its mapped functions, as skipped; returns how many."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    source = (REPO_ROOT / module.path).read_text()
    annotations = annotation_spans(source)
    scope = function_spans(source, module.functions) if module.functions else None
    skipped = 0
    with use_db(str(session_path), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            if _within(item, annotations):
                output = ANNOTATION_SKIP_OUTPUT
            elif scope is not None and not _within(item, scope):
                output = OUTSIDE_FUNCTIONS_OUTPUT
            else:
                continue
            db.set_result(
                item.job_id, WorkResult(output=output, worker_outcome=WorkerOutcome.SKIPPED)
            )
            skipped += 1
    return skipped


def forget_unkilled(session_path: Path) -> int:
    """Make the survivors and the timed-out mutants pending again (after tests were added, or a
    run on a loaded machine); returns how many. The next run tests them with today's tests."""
    from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db
    from cosmic_ray.work_item import TestOutcome

    with use_db(str(session_path), WorkDB.Mode.open) as db, db._session_maker.begin() as session:
        unkilled = session.query(WorkResultStorage).filter(
            (WorkResultStorage.test_outcome == TestOutcome.SURVIVED)
            | (WorkResultStorage.output == "timeout")
        )
        return unkilled.delete(synchronize_session=False)


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plan_session(name: str, module: MutatedModule, fresh: bool) -> Path:
    """Init the session unless one for this exact source exists (then the run resumes)."""
    config_path = write_config(name, module)
    session_path = SESSION_DIR / f"{name}.sqlite"
    digest_path = SESSION_DIR / f"{name}.sha256"
    digest = source_digest(REPO_ROOT / module.path)
    stale = (
        not session_path.exists() or not digest_path.exists() or digest_path.read_text() != digest
    )
    if fresh or stale:
        cosmic_ray("init", "--force", str(config_path), str(session_path))
        subprocess.run(
            [
                PYTHON,
                "-m",
                "cosmic_ray.tools.filters.operators_filter",
                str(session_path),
                str(config_path),
            ],
            cwd=REPO_ROOT,
            check=True,
        )
        skip_unmapped_mutants(session_path, module)
        if not fresh:
            restored = mutation_ledger.restore(session_path, ledger_path(name), digest)
            if restored:
                print(f"{name}: {restored} verdicts taken from {ledger_path(name)}")
        digest_path.write_text(digest)
    return session_path


def ledger_path(name: str) -> Path:
    return LEDGER_DIR / f"{name}.jsonl"


def cosmic_ray(*args: str) -> None:
    subprocess.run([PYTHON, "-m", "cosmic_ray.cli", *args], cwd=REPO_ROOT, check=True)


def execute(name: str, session_path: Path, budget_minutes: float | None) -> float:
    """Run the pending mutants (within the budget); returns the seconds spent."""
    config_path = SESSION_DIR / f"{name}.toml"
    started = time.monotonic()
    proc = subprocess.Popen(
        [PYTHON, "-m", "cosmic_ray.cli", "exec", str(config_path), str(session_path)],
        cwd=REPO_ROOT,
    )
    try:
        proc.wait(timeout=None if budget_minutes is None else budget_minutes * 60)
    except subprocess.TimeoutExpired:
        # SIGINT, not SIGTERM: cosmic-ray then unwinds and puts the original source back.
        proc.send_signal(signal.SIGINT)
        proc.wait()
    return time.monotonic() - started


def summarize(name: str, module: MutatedModule, session_path: Path, seconds: float) -> None:
    """One line of counts, then every surviving mutant's diff."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    counts = {"killed": 0, "survived": 0, "timed_out": 0, "incompetent": 0}
    filtered = in_annotations = outside = 0
    survivors = []
    with use_db(str(session_path), WorkDB.Mode.open) as db:
        total = db.num_work_items
        for _item, result in db.completed_work_items:
            if result.output == ANNOTATION_SKIP_OUTPUT:
                in_annotations += 1
            elif result.output == OUTSIDE_FUNCTIONS_OUTPUT:
                outside += 1
            elif result.worker_outcome == WorkerOutcome.SKIPPED:
                filtered += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                counts["survived"] += 1
                survivors.append(result.diff)
            elif result.test_outcome == TestOutcome.KILLED:
                counts["timed_out" if result.output == "timeout" else "killed"] += 1
            else:
                counts["incompetent"] += 1
    done = sum(counts.values())
    print(
        f"{name} ({module.path}): {total} planned, {filtered} operators filtered out, "
        f"{in_annotations} in annotations, "
        + (f"{outside} outside the mapped functions, " if module.functions else "")
        + f"{done}/{total - filtered - in_annotations - outside} run, "
        + ", ".join(f"{key} {value}" for key, value in counts.items())
        + (f", this run {seconds:.0f} s" if seconds else "")
    )
    for diff in survivors:
        print(diff)


def run_module(name: str, budget_minutes: float | None, fresh: bool, retest: bool) -> None:
    module = MODULES[name]
    source_path = REPO_ROOT / module.path
    tracked_changes = subprocess.run(
        ["git", "diff", "--quiet", "--", module.path], cwd=REPO_ROOT, check=False
    )
    if tracked_changes.returncode != 0:
        raise DirtyModuleError(f"{module.path} has uncommitted changes; commit them first")
    original = source_path.read_bytes()
    try:
        session_path = plan_session(name, module, fresh)
        if retest:
            print(f"{name}: {forget_unkilled(session_path)} unkilled mutants to test again")
        seconds = execute(name, session_path, budget_minutes)
    finally:
        if source_path.read_bytes() != original:
            source_path.write_bytes(original)
    mutation_ledger.save(session_path, ledger_path(name), source_digest(source_path))
    summarize(name, module, session_path, seconds)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Mutation testing (cosmic-ray) of the data- and safety-critical modules, "
        "each judged by its own unit tests; sessions in .mutation/ resume between runs."
    )
    parser.add_argument(
        "--module",
        choices=list(MODULES),
        action="append",
        metavar="NAME",
        help="module to mutate, repeatable (default: every module, in this priority order: "
        + ", ".join(MODULES)
        + ")",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop each module's run after this many minutes; the next run resumes (default: none)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="discard the saved sessions and the ledgers' verdicts and re-plan the mutants",
    )
    parser.add_argument(
        "--retest",
        action="store_true",
        help="test the surviving and timed-out mutants of the saved sessions again "
        "(after adding tests)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the saved sessions' counts and surviving mutants, run nothing",
    )
    parser.add_argument(
        "--list", action="store_true", help="print the module -> tests map and exit"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, module in MODULES.items():
            print(f"{name}: {module.path} <- {' '.join(module.tests)}")
        return 0
    if args.report:
        for name in args.module or list(MODULES):
            session_path = SESSION_DIR / f"{name}.sqlite"
            if session_path.exists():
                summarize(name, MODULES[name], session_path, 0.0)
        return 0
    SESSION_DIR.mkdir(exist_ok=True)
    # One run per checkout: a module's tests import the other mapped modules (partition's
    # tests run raft.py and segment.py), so a mutant of one would fail another's tests there.
    with open(SESSION_DIR / "run.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MutationRunInProgressError(
                f"another make mutate runs in {REPO_ROOT}; wait for it (one run per checkout)"
            ) from None
        for name in args.module or list(MODULES):
            run_module(name, args.minutes, args.fresh, args.retest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
