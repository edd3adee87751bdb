"""The verdicts of a module's mutation session, kept in git so a fresh clone resumes the run.

A cosmic-ray session (`.mutation/<name>.sqlite`) lives in one checkout; a full run of a large
module takes longer than one sitting on the shared machine, and every fresh machine would start
it over. The ledger (`docs/mutation-ledger/<name>.jsonl`) is the part worth keeping: the
module's source digest on the first line, then one line per mutant that was run, in
cosmic-ray's order:

    {"digest": "<sha256 of the module's source>"}
    {"operator": "core/NumberReplacer", "occurrence": 3, "line": 80, "outcome": "killed"}
    {"operator": "...", "occurrence": 0, "line": 612, "outcome": "survived", "diff": "--- a/..."}

`outcome` is killed, timeout, survived or incompetent; survivors keep their diff (the report
prints it). A mutant is named by its operator and occurrence, which cosmic-ray derives from the
source alone, so a session planned again from the same source has the same mutants: `restore`
marks those the ledger holds as done and the run goes on with the rest. A ledger whose digest
is not the module's (the source changed) restores nothing: its verdicts were about other code.
Skipped mutants (the operators filter, annotations) are not recorded: planning skips them again.
"""

from __future__ import annotations

import json
from pathlib import Path

TIMEOUT_OUTPUT = "timeout"  # cosmic-ray's output for a mutant whose tests outran the timeout


def _outcome(result) -> str | None:
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    if result.worker_outcome == WorkerOutcome.SKIPPED:
        return None
    if result.test_outcome == TestOutcome.KILLED:
        return "timeout" if result.output == TIMEOUT_OUTPUT else "killed"
    if result.test_outcome == TestOutcome.SURVIVED:
        return "survived"
    return "incompetent"


def _result(entry: dict):
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    outcome = entry["outcome"]
    if outcome == "incompetent":
        return WorkResult(worker_outcome=WorkerOutcome.NORMAL,
                          test_outcome=TestOutcome.INCOMPETENT, output="from the ledger")
    test_outcome = TestOutcome.SURVIVED if outcome == "survived" else TestOutcome.KILLED
    return WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=test_outcome,
                      output=TIMEOUT_OUTPUT if outcome == "timeout" else "from the ledger",
                      diff=entry.get("diff"))


def _key(item) -> tuple[str, int]:
    (mutation,) = item.mutations
    return mutation.operator_name, mutation.occurrence


def save(session_path: Path, ledger_path: Path, digest: str) -> int:
    """Write the session's verdicts to the ledger (replacing it); returns how many."""
    from cosmic_ray.work_db import WorkDB, use_db

    lines = [json.dumps({"digest": digest})]
    with use_db(str(session_path), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            outcome = _outcome(result)
            if outcome is None:
                continue
            operator, occurrence = _key(item)
            entry = {"operator": operator, "occurrence": occurrence,
                     "line": item.mutations[0].start_pos[0], "outcome": outcome}
            if outcome == "survived":
                entry["diff"] = result.diff
            lines.append(json.dumps(entry, sort_keys=True))
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    ledger_path.write_text("\n".join(lines[:1] + sorted(lines[1:])) + "\n")
    return len(lines) - 1


def restore(session_path: Path, ledger_path: Path, digest: str) -> int:
    """Mark the session's pending mutants the ledger judged as done; returns how many."""
    from cosmic_ray.work_db import WorkDB, use_db

    if not ledger_path.exists():
        return 0
    lines = ledger_path.read_text().splitlines()
    if not lines or json.loads(lines[0]).get("digest") != digest:
        return 0
    verdicts = {(entry["operator"], entry["occurrence"]): entry
                for entry in map(json.loads, lines[1:])}
    restored = 0
    with use_db(str(session_path), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            entry = verdicts.get(_key(item))
            if entry is not None:
                db.set_result(item.job_id, _result(entry))
                restored += 1
    return restored
