"""The pipeline benchmark's bookkeeping: count agreement, ratios, and the /proc readings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scripts.bench.pipeline import BenchError, _check_counts, ratios
from scripts.bench.process_stats import descendants, disk_bytes, tree_stats

COUNTS = {"q1": 3, "q2": 5, "q3": 2, "q4": 1}


def _result(**overrides):
    sessions = [{"service": "fresh", "session_s": 30.0, "upload_rows_per_s": 100_000,
                 "result_rows": dict(COUNTS)},
                {"service": "warm", "session_s": 20.0, "upload_rows_per_s": 120_000,
                 "result_rows": dict(COUNTS)}]
    result = {"pipeline": {"sessions": sessions},
              "spark_csv": {"queries_s": 40.0, "result_rows": dict(COUNTS)},
              "duckdb": {"seconds": {"total": 5.0}, "result_rows": dict(COUNTS)}}
    result.update(overrides)
    return result


def test_ratios_compare_the_fresh_session_with_each_baseline():
    assert ratios(_result()) == {
        "fresh_session_s": 30.0, "warm_session_s": 20.0, "upload_rows_per_s": 100_000,
        "fresh_session_over_spark_csv": 0.75, "fresh_session_over_duckdb": 6.0}


def test_any_disagreement_in_result_counts_fails_the_run():
    _check_counts(_result())
    with pytest.raises(BenchError, match="disagree"):
        _check_counts(_result(duckdb={"seconds": {"total": 5.0},
                                      "result_rows": {**COUNTS, "q2": 6}}))


def test_a_tree_holds_its_children_and_adds_their_cpu():
    child = subprocess.Popen([sys.executable, "-c", "import time; sum(range(10**7)); "
                              "time.sleep(30)"])
    try:
        assert child.pid in descendants(os.getpid())
        stats = tree_stats(os.getpid())
        assert stats.processes >= 2 and stats.cpu_s > 0
        assert stats.peak_rss_bytes_max > 0 and stats.peak_rss_bytes_sum >= \
            stats.peak_rss_bytes_max
    finally:
        child.kill()
        child.wait()


def test_disk_bytes_counts_allocated_blocks_not_sizes(tmp_path):
    sparse = tmp_path / "sparse.log"
    with open(sparse, "wb") as file:
        file.truncate(64 * 1024 * 1024)
    written = tmp_path / "sub" / "written.log"
    written.parent.mkdir()
    written.write_bytes(b"x" * 1024 * 1024)
    assert 1024 * 1024 <= disk_bytes(tmp_path) < 2 * 1024 * 1024
