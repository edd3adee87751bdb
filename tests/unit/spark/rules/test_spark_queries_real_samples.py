"""Spark's four queries on the real Kaggle samples equal the plain-Python reference."""

from __future__ import annotations

import pytest

from oracle import reference
from oracle.result_compare import assert_all_results
from scripts.bench.spark_csv import read_airports_csv, read_flights_csv
from tests.real_samples import REAL_SAMPLES_DIR
from tests.unit.spark.rules.spark_test_frames import collected, compute

AIRPORTS_FILE = REAL_SAMPLES_DIR / "airports-codepublic.csv"


@pytest.fixture(scope="module")
def airports(spark):
    return read_airports_csv(spark, str(AIRPORTS_FILE))


@pytest.mark.parametrize("sample", ["itineraries_1000_a.csv", "itineraries_999_b.csv"])
def test_real_sample_equals_reference(spark, airports, sample, query_path):
    flights_file = REAL_SAMPLES_DIR / sample
    expected = reference.compute_files(flights_file, AIRPORTS_FILE)
    results = compute(query_path, spark, read_flights_csv(spark, str(flights_file)), airports)
    try:
        assert_all_results(collected(results), expected.by_query())
        assert results.invalid_counts == expected.invalid_counts
        assert (results.rows, results.valid_rows, results.q2_skipped) == (
            expected.rows, expected.valid_rows, expected.q2_skipped)
    finally:
        results.release()
    # The samples exercise every query: an empty result would compare equal and prove nothing.
    assert expected.rows > 900
    assert all(expected.by_query().values()), {q: len(r) for q, r in expected.by_query().items()}
