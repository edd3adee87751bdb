"""Spark equals the plain-Python reference on generated data with malformed rows (>= 100k)."""

from __future__ import annotations

import pytest

from oracle import reference
from oracle.result_compare import assert_all_results
from scripts.bench.spark_csv import read_airports_csv, read_flights_csv
from scripts.datagen.generate import generate
from tests.unit.spark.rules.spark_test_frames import collected, compute

GENERATED_ROWS = 100_000
INVALID_RATE = 0.02
SEED = 4


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("generated"), GENERATED_ROWS, SEED, INVALID_RATE)


@pytest.fixture(scope="module")
def expected(generated):
    return reference.compute_files(generated.flights_path, generated.airports_path)


@pytest.mark.slow
def test_generated_data_equals_reference(spark, generated, expected, query_path):
    results = compute(query_path, spark, read_flights_csv(spark, str(generated.flights_path)),
                      read_airports_csv(spark, str(generated.airports_path)))
    try:
        assert_all_results(collected(results), expected.by_query())
        assert results.invalid_counts == expected.invalid_counts
        assert (results.rows, results.valid_rows, results.q2_skipped) == (
            expected.rows, expected.valid_rows, expected.q2_skipped)
    finally:
        results.release()
    assert expected.rows == GENERATED_ROWS
    assert all(expected.by_query().values()), {q: len(r) for q, r in expected.by_query().items()}


@pytest.mark.slow
def test_every_malformed_row_is_counted(generated, expected):
    """The generator breaks one rule per malformed row: our counts must add up to its own."""
    made = generated.invalid_rows
    counted = expected.invalid_counts
    assert generated.invalid_total > 0.5 * INVALID_RATE * GENERATED_ROWS
    assert sum(counted.values()) == generated.invalid_total
    # Short rows lose trailing fields, so they land on whichever rule their cut breaks first.
    assert counted["empty_leg_id"] == made["empty_leg_id"]
    assert counted["bad_airport_code"] >= made["bad_airport_code"]
    assert counted["bad_duration"] >= made["bad_duration"]
    assert counted["bad_fare"] >= made["bad_fare"] + made["negative_fare"] + made["non_finite_fare"]
    assert counted["empty_segments"] >= made["empty_segment_arrivals"]
