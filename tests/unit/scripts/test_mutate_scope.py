"""scripts/mutate.py's scope filters, on source text: a mutant is run only where a change can
matter (not inside an unevaluated annotation) and, for a module mapped by function, only inside
the mapped functions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from cosmic_ray import work_db
from cosmic_ray.work_item import MutationSpec, WorkItem

from scripts.mutate import (
    ANNOTATION_SKIP_OUTPUT,
    MODULES,
    OUTSIDE_FUNCTIONS_OUTPUT,
    REPO_ROOT,
    MutatedModule,
    _within,
    annotation_spans,
    function_spans,
    skip_unmapped_mutants,
)

SOURCE = """from __future__ import annotations


def helper(x: int) -> int:
    return x + 1


class Node:
    def committed(self, index: int) -> bool:
        return index < 3

    def other(self) -> int:
        return 2 * 3
"""


def mutant_at(line: int, column: int, end_column: int) -> SimpleNamespace:
    """A work item as cosmic-ray plans one: its mutations' (line, column) spans."""
    return SimpleNamespace(
        mutations=[SimpleNamespace(start_pos=(line, column), end_pos=(line, end_column))]
    )


def test_a_mapped_method_is_in_scope_and_its_neighbours_are_not():
    spans = function_spans(SOURCE, ("committed",))
    assert spans == [((9, 4), (10, 24))]
    assert _within(mutant_at(10, 21, 22), spans)  # its `<`
    assert not _within(mutant_at(13, 17, 18), spans)  # `*` in other()
    assert not _within(mutant_at(5, 13, 14), spans)  # `+` in helper()


def test_a_name_the_module_does_not_define_is_refused():
    with pytest.raises(ValueError, match="no function named gone"):
        function_spans(SOURCE, ("committed", "gone"))


def test_an_annotation_is_out_of_scope_and_the_body_is_not():
    spans = annotation_spans(SOURCE)
    assert _within(mutant_at(4, 14, 17), spans)  # `int` of helper's argument
    assert not _within(mutant_at(5, 13, 14), spans)


def test_every_mapped_function_exists_in_its_module():
    for name, module in MODULES.items():
        if module.functions:
            source = (REPO_ROOT / module.path).read_text()
            assert len(function_spans(source, module.functions)) >= len(module.functions), name


def test_a_session_runs_only_the_mutants_inside_the_mapped_functions(tmp_path):
    """On a real cosmic-ray session of a real module: one mutant in each mapped function's
    body stays pending; one in another method, one in a mapped function's annotation, are
    skipped, each with its reason."""
    module = MutatedModule("scripts/mutation_ledger.py", (), functions=("restore", "save"))
    source = (REPO_ROOT / module.path).read_text()
    [(restore, _)] = function_spans(source, ("restore",))
    [(save, _)] = function_spans(source, ("save",))
    other = min(start for start, _end in function_spans(source, ("_outcome",)))
    annotation = next(start for start, _end in annotation_spans(source) if start[0] == save[0])
    positions = {
        "in restore": (restore[0] + 2, 8),
        "in save": (save[0] + 2, 8),
        "elsewhere": (other[0] + 1, 8),
        "annotation": annotation,
    }
    session = tmp_path / "session.sqlite"
    with work_db.use_db(str(session), work_db.WorkDB.Mode.create) as db:
        for job_id, (line, column) in positions.items():
            db.add_work_item(
                WorkItem.single(
                    job_id,
                    MutationSpec(
                        module.path, "core/NumberReplacer", 0, (line, column), (line, column + 1)
                    ),
                )
            )
    assert skip_unmapped_mutants(session, module) == 2
    with work_db.use_db(str(session), work_db.WorkDB.Mode.open) as db:
        pending = {item.job_id for item in db.pending_work_items}
        skipped = {item.job_id: result.output for item, result in db.completed_work_items}
    assert pending == {"in restore", "in save"}
    assert skipped == {"elsewhere": OUTSIDE_FUNCTIONS_OUTPUT, "annotation": ANNOTATION_SKIP_OUTPUT}
