"""scripts/mutation_ledger.py on real cosmic-ray sessions: the verdicts of one session, saved,
are what a session planned again from the same source resumes with."""

from __future__ import annotations

import json
import uuid

import pytest
from cosmic_ray import work_db
from cosmic_ray.work_item import MutationSpec, WorkerOutcome, WorkItem, WorkResult
from cosmic_ray.work_item import TestOutcome as Outcome

from scripts import mutation_ledger

MUTANTS = [("core/NumberReplacer", 0, 10), ("core/NumberReplacer", 1, 12),
           ("core/AddNot", 0, 20), ("core/ReplaceComparisonOperator_Lt_LtE", 0, 30),
           ("core/ReplaceBinaryOperator_Add_Pow", 0, 40)]
DIGEST = "ab" * 32


def plan(path) -> dict[tuple[str, int], str]:
    """A session of MUTANTS, as `cosmic-ray init` makes one (fresh job ids); key -> job id."""
    jobs = {}
    with work_db.use_db(str(path), work_db.WorkDB.Mode.create) as db:
        for operator, occurrence, line in MUTANTS:
            job_id = uuid.uuid4().hex
            db.add_work_item(WorkItem.single(job_id, MutationSpec(
                "m.py", operator, occurrence, (line, 4), (line, 9))))
            jobs[(operator, occurrence)] = job_id
    return jobs


def results(path) -> dict[tuple[str, int], object]:
    with work_db.use_db(str(path), work_db.WorkDB.Mode.open) as db:
        return {(item.mutations[0].operator_name, item.mutations[0].occurrence): result
                for item, result in db.completed_work_items}


@pytest.fixture
def judged(tmp_path):
    """A session with a killed, a timed-out, a surviving and a skipped mutant, one not run."""
    path = tmp_path / "first.sqlite"
    jobs = plan(path)
    with work_db.use_db(str(path), work_db.WorkDB.Mode.open) as db:
        db.set_result(jobs[("core/NumberReplacer", 0)], WorkResult(
            worker_outcome=WorkerOutcome.NORMAL, test_outcome=Outcome.KILLED, output="E"))
        db.set_result(jobs[("core/NumberReplacer", 1)], WorkResult(
            worker_outcome=WorkerOutcome.NORMAL, test_outcome=Outcome.KILLED,
            output="timeout"))
        db.set_result(jobs[("core/AddNot", 0)], WorkResult(
            worker_outcome=WorkerOutcome.NORMAL, test_outcome=Outcome.SURVIVED,
            output="ok", diff="--- a/m.py\n+++ b/m.py\n-x\n+not x\n"))
        db.set_result(jobs[("core/ReplaceBinaryOperator_Add_Pow", 0)], WorkResult(
            worker_outcome=WorkerOutcome.SKIPPED, output="filtered"))
    return path


def test_the_ledger_holds_each_mutant_run_with_its_outcome_and_a_survivors_diff(judged, tmp_path):
    ledger = tmp_path / "ledger" / "m.jsonl"
    assert mutation_ledger.save(judged, ledger, DIGEST) == 3
    header, *entries = map(json.loads, ledger.read_text().splitlines())
    assert header == {"digest": DIGEST}
    by_key = {(entry["operator"], entry["occurrence"]): entry for entry in entries}
    assert by_key == {
        ("core/NumberReplacer", 0): {"operator": "core/NumberReplacer", "occurrence": 0,
                                     "line": 10, "outcome": "killed"},
        ("core/NumberReplacer", 1): {"operator": "core/NumberReplacer", "occurrence": 1,
                                     "line": 12, "outcome": "timeout"},
        ("core/AddNot", 0): {"operator": "core/AddNot", "occurrence": 0, "line": 20,
                             "outcome": "survived",
                             "diff": "--- a/m.py\n+++ b/m.py\n-x\n+not x\n"},
    }


def test_a_session_planned_again_resumes_with_the_ledgers_verdicts(judged, tmp_path):
    ledger = tmp_path / "m.jsonl"
    mutation_ledger.save(judged, ledger, DIGEST)
    again = tmp_path / "again.sqlite"
    plan(again)
    assert mutation_ledger.restore(again, ledger, DIGEST) == 3
    restored = results(again)
    assert set(restored) == {("core/NumberReplacer", 0), ("core/NumberReplacer", 1),
                             ("core/AddNot", 0)}, "the mutant not run and the skipped one pend"
    assert restored[("core/NumberReplacer", 0)].test_outcome == Outcome.KILLED
    assert restored[("core/NumberReplacer", 1)].output == "timeout"
    survivor = restored[("core/AddNot", 0)]
    assert survivor.test_outcome == Outcome.SURVIVED and "+not x" in survivor.diff
    mutation_ledger.save(again, tmp_path / "resaved.jsonl", DIGEST)
    assert (tmp_path / "resaved.jsonl").read_text() == ledger.read_text(), "a round trip"


def test_a_ledger_of_other_source_or_none_restores_nothing(judged, tmp_path):
    ledger = tmp_path / "m.jsonl"
    mutation_ledger.save(judged, ledger, DIGEST)
    again = tmp_path / "again.sqlite"
    plan(again)
    assert mutation_ledger.restore(again, ledger, "cd" * 32) == 0
    assert mutation_ledger.restore(again, tmp_path / "missing.jsonl", DIGEST) == 0
    assert results(again) == {}
