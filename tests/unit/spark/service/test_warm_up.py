"""The query service's warm-up: its sample exercises every branch of the plan, and one run of
Q1-Q4 over it through the `warm_up_sample` data source gives what the reference gives."""

from __future__ import annotations

import pytest

from oracle.reference import airport_coordinates, compute
from spark.rules.contract import INVALID_KINDS
from spark.service.warm_up import WarmUpError, _check, sample_airports, sample_flights, warm_up

SAMPLE_ROWS = 900


def _reference():
    flights = sample_flights(0, SAMPLE_ROWS).to_pylist()
    return compute(flights, airport_coordinates(sample_airports().to_pylist()))


def test_the_sample_fails_every_validity_rule_and_feeds_every_query():
    reference = _reference()
    assert reference.rows == SAMPLE_ROWS
    assert all(reference.invalid_counts[kind] >= 1 for kind in INVALID_KINDS), \
        reference.invalid_counts
    assert reference.q2_skipped >= 1, "a route with an unknown airport"
    assert all(reference.by_query().values()), {q: len(r) for q, r in
                                                reference.by_query().items()}


def test_partitions_together_yield_each_sample_row_once():
    halves = [sample_flights(0, 450), sample_flights(450, 450)]
    leg_ids = [leg for half in halves for leg in half.column("legId").to_pylist()]
    assert leg_ids == sample_flights(0, SAMPLE_ROWS).column("legId").to_pylist()
    assert len(set(leg_ids)) == SAMPLE_ROWS


def test_warm_up_runs_the_queries_over_the_sample(spark):
    assert warm_up(spark, SAMPLE_ROWS) > 0
    # The same counts as the reference, through the service's own plan.
    from spark.rules.derived_queries import airport_coordinates, compute_all_derived
    from spark.service.warm_up import SOURCE_NAME

    reader = spark.read.format(SOURCE_NAME).option("rows", str(SAMPLE_ROWS))
    coordinates = airport_coordinates(reader.option("table", "airports").load())
    results = compute_all_derived(reader.option("table", "flights")
                                  .option("coordinates", coordinates.to_json()).load())
    try:
        counts = {q: frame.count() for q, frame in results.frames().items()}
    finally:
        results.release()
    reference = _reference()
    assert counts == {q: len(rows) for q, rows in reference.by_query().items()}
    assert results.invalid_counts == reference.invalid_counts


def test_a_sample_that_yields_nothing_is_an_error():
    with pytest.raises(WarmUpError):
        _check(10, {"q1": 1, "q2": 0, "q3": 1, "q4": 1}, 10)
    with pytest.raises(WarmUpError):
        _check(9, {"q1": 1, "q2": 1, "q3": 1, "q4": 1}, 10)


def test_an_idle_pass_runs_every_query_over_its_small_sample(spark):
    """The idle passes' sample (driver.IDLE_PASS_ROWS) still feeds every query: `warm_up`
    raises WarmUpError on a sample that yields no rows for one of them."""
    from spark.service.driver import IDLE_PASS_ROWS

    assert warm_up(spark, IDLE_PASS_ROWS) > 0
