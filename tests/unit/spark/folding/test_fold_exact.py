"""spark/folding's pure parts against the plain-Python reference of docs/queries.md: a
session's rows folded micro-batch by micro-batch (in any cut, with compaction and a recovery
from the fold files in between) finish with the reference's Q1-Q4 and counts."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from oracle import reference
from oracle.result_compare import assert_all_results
from scripts.datagen.generate import generate
from spark.folding import session_state
from spark.folding.batch_fold import fold_of
from spark.folding.finish import mean_fare, q3_table, q4_table
from spark.folding.session_files import SessionFiles, session_key
from spark.folding.session_state import SessionState
from spark.rules.result_columns import format_table
from tests.unit.spark.folding.fold_harness import partial

CLIENT = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fold-data")
    generate(directory, rows=12_000, seed=5, invalid_rate=0.03)
    flights = list(reference.read_flight_rows(directory / "itineraries.csv"))
    airports = reference.airport_coordinates(
        reference.read_airport_rows(directory / "airports.csv"))
    return flights, airports, reference.compute(flights, airports)


def _cuts(rows: int, batches: int, seed: int) -> list[int]:
    return sorted(random.Random(seed).sample(range(1, rows), batches - 1)) + [rows]


def _fold_all(state: SessionState, flights, airports, cuts, first_batch=0, on_batch=None):
    """Fold the rows in micro-batches ending at `cuts`; the Q1/Q2 rows each batch found."""
    streamed = {"q1": [], "q2": []}
    start = 0
    for batch_id, end in enumerate(cuts, start=first_batch):
        # Each micro-batch in two ranges, as a topic's partitions would give them.
        middle = (start + end) // 2
        fold = fold_of([partial(flights[start:middle], airports),
                        partial(flights[middle:end], airports)])
        written = {}
        for query in ("q1", "q2"):
            rows, slices = state.summary.written[query]
            found = format_table(query, getattr(fold, query))
            streamed[query] += found
            written[query] = (rows + len(found), slices + (1 if found else 0))
        state.compact(batch_id - 1)
        state.add(batch_id, fold, written)
        if on_batch is not None:
            state = on_batch(state, batch_id) or state
        start = end
    return state, streamed


def _results(state: SessionState, streamed) -> dict[str, list]:
    q4_rows = state.q4_rows()  # unmerged, as the finish takes it
    return {"q1": streamed["q1"], "q2": streamed["q2"],
            "q3": format_table("q3", q3_table(state.q3_candidates())),
            "q4": format_table("q4", q4_table(q4_rows, mean_fare(q4_rows)))}


@pytest.mark.parametrize("batches,seed", [(1, 0), (7, 1), (40, 2)])
def test_folded_in_any_cut_the_results_are_the_reference(dataset, tmp_path, monkeypatch,
                                                          batches, seed):
    flights, airports, expected = dataset
    monkeypatch.setattr(session_state, "COMPACT_ROWS_MIN", 500)  # compaction happens too
    state = SessionState(SessionFiles(tmp_path, CLIENT), session_key(CLIENT))
    state, streamed = _fold_all(state, flights, airports, _cuts(len(flights), batches, seed))
    assert_all_results(_results(state, streamed), expected.by_query())
    assert state.summary.rows == expected.rows == len(flights)
    assert state.summary.valid_rows == expected.valid_rows
    assert state.summary.invalid == expected.invalid_counts
    assert state.summary.q2_skipped == expected.q2_skipped
    assert sum(expected.invalid_counts.values()) > 0  # the scenario has invalid rows
    assert mean_fare(state.q4_map()) == expected.mean_fare


def test_a_state_recovered_from_its_fold_files_goes_on_as_if_never_stopped(dataset, tmp_path,
                                                                           monkeypatch):
    flights, airports, expected = dataset
    monkeypatch.setattr(session_state, "COMPACT_ROWS_MIN", 500)
    files = SessionFiles(tmp_path, CLIENT)
    recovered_at = []

    def crash_and_recover(state: SessionState, batch_id: int) -> SessionState | None:
        if batch_id % 6 != 5:
            return None
        recovered = SessionState(files, state.key)
        recovered.load(committed_batch=batch_id)
        recovered_at.append((batch_id, any(p.name.startswith("base-")
                                           for p in files.folds.iterdir())))
        assert recovered.summary == state.summary
        return recovered

    state = SessionState(files, session_key(CLIENT))
    state, streamed = _fold_all(state, flights, airports, _cuts(len(flights), 30, 3),
                                on_batch=crash_and_recover)
    assert any(compacted for _, compacted in recovered_at)  # recovered from a base too
    assert_all_results(_results(state, streamed), expected.by_query())


def test_a_fold_file_of_an_uncommitted_batch_is_dropped_on_recovery(dataset, tmp_path):
    flights, airports, _ = dataset
    files = SessionFiles(tmp_path, CLIENT)
    state = SessionState(files, session_key(CLIENT))
    state, _ = _fold_all(state, flights[:3000], airports, [1000, 2000, 3000])
    recovered = SessionState(files, state.key)
    recovered.load(committed_batch=1)  # batch 2 ran but Spark did not commit it
    assert recovered.summary.last_batch == 1
    assert recovered.summary.rows == 2000
    assert files.fold_batches() == [0, 1]


def test_the_mean_is_the_correctly_rounded_sum_over_the_count():
    # fsum(0.1, 0.2, 0.3) = 0.6 and 0.6 / 3 < 0.2; a left-to-right sum gives 0.2000...04.
    fares = pa.table({"route_id": [1, 1, 2], "totalFare": [0.1, 0.2, 0.3], "n": [1, 1, 1]})
    mean = mean_fare(fares)
    assert mean == pytest.approx(0.2) and mean < 0.2
    assert q4_table(fares, mean).to_pylist() == [
        {"route": "AAA-AAB", "avgFare": 0.2, "maxFare": 0.2},
        {"route": "AAA-AAC", "avgFare": 0.3, "maxFare": 0.3}]
    assert mean_fare(fares.slice(0, 0)) is None
