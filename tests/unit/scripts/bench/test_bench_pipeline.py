"""The pipeline benchmark's bookkeeping: count agreement, ratios, and the /proc readings."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from common.flights.result_csv import csv_text, format_row
from scripts import bench_pipeline
from scripts.bench.pipeline import (
    BenchError,
    _check_counts,
    _journal_bytes,
    _session_dirs,
    check_results,
    ratios,
)
from scripts.bench.process_stats import PeakRssWatch, descendants, disk_bytes, tree_stats
from scripts.bench.result_gate import ResultMismatchError

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


def wait_for(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


CHILD_HOLDING_40_MB = (
    "import sys; held = bytearray(40 << 20)\n"
    "for i in range(0, len(held), 4096): held[i] = 1\n"
    "print('held', flush=True); sys.stdin.readline()")


def test_the_watch_reports_the_childs_own_peak_where_ru_maxrss_reports_the_parents():
    # This process holds 300 MB; Linux carries that high-water mark into a child's ru_maxrss.
    ballast = bytearray(300 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    child = subprocess.Popen([sys.executable, "-c", CHILD_HOLDING_40_MB], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    watch = PeakRssWatch(child.pid, interval_s=0.01)
    assert child.stdout.readline() == "held\n"
    # The scenario before the outcome: the watch saw the child hold its 40 MB before it exits.
    wait_for(lambda: watch.peak_bytes >= 40 << 20, "the watch saw the child's 40 MB")
    child.stdin.write("\n")
    child.stdin.close()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    peak = watch.stop()
    _pid, _status, usage = os.wait4(child.pid, 0)
    child.stdout.close()
    assert 40 << 20 <= peak < 200 << 20  # the child's 40 MB and its interpreter
    assert usage.ru_maxrss * 1024 >= 300 << 20  # the parent's ballast: why it is not used
    del ballast


def test_disk_bytes_counts_allocated_blocks_not_sizes(tmp_path):
    sparse = tmp_path / "sparse.log"
    with open(sparse, "wb") as file:
        file.truncate(64 * 1024 * 1024)
    written = tmp_path / "sub" / "written.log"
    written.parent.mkdir()
    written.write_bytes(b"x" * 1024 * 1024)
    assert 1024 * 1024 <= disk_bytes(tmp_path) < 2 * 1024 * 1024


def test_disk_bytes_and_session_dirs_skip_a_directory_deleted_while_they_walk(tmp_path,
                                                                               monkeypatch):
    """A broker renames a topic into @deleted and removes it while the benchmark walks: a
    50-session run died there (pathlib's rglob raised FileNotFoundError)."""
    kept = tmp_path / "broker-1" / "flights.keep" / "0"
    gone = tmp_path / "broker-1" / "@deleted" / "flights.c1.17" / "2"
    for directory in (kept, gone):
        directory.mkdir(parents=True)
        (directory / "00000000000000000000.log").write_bytes(b"x" * 8192)
    scandir = os.scandir

    def vanishing(path):
        if str(path).endswith("flights.c1.17"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert 8192 <= disk_bytes(tmp_path) < 2 * 8192
    assert [path.name for path in _session_dirs(tmp_path, "c1")] == ["flights.c1.17"]


ROWS = {"q1": [("a", "ATL-BOS", 100.0, "X||Y||Z")], "q2": [("a", "ATL-BOS", 4000.5)],
        "q3": [("a", "ATL-BOS", "X||Y||Z", "PT9H5M")], "q4": [("ATL-BOS", 100.0, 100.0)]}


def _session_files(directory, rows):
    directory.mkdir()
    for query, query_rows in rows.items():
        (directory / f"{query}.csv").write_text(
            csv_text(query, (format_row(query, row) for row in query_rows)))
    return str(directory)


def test_journal_bytes_are_read_per_broker_and_nothing_else(tmp_path):
    for broker, size in (("broker-1", 120), ("broker-2", 4096)):
        (tmp_path / broker / "@replication").mkdir(parents=True)
        (tmp_path / broker / "@replication" / "journal.log").write_bytes(b"j" * size)
    (tmp_path / "broker-3" / "@replication").mkdir(parents=True)  # no journal yet
    (tmp_path / "broker-1" / "flights.c1").mkdir()
    (tmp_path / "broker-1" / "flights.c1" / "journal.log").write_bytes(b"x" * 9)
    assert _journal_bytes(tmp_path) == {"broker-1": 120, "broker-2": 4096}


def test_the_gate_reads_every_session_of_the_result(tmp_path):
    fresh = _session_files(tmp_path / "session-0", ROWS)
    warm = _session_files(tmp_path / "session-1", {**ROWS, "q2": [("a", "ATL-BOS", 4000.6)]})
    result = {"pipeline": {"sessions": [{"service": "fresh", "results_dir": fresh},
                                        {"service": "warm", "results_dir": warm}]}}
    with pytest.raises(ResultMismatchError, match=r"q2: session 1 \(warm\) differs from duckdb"):
        check_results(result, ROWS)
    result["pipeline"]["sessions"].pop()
    assert check_results(result, ROWS).rows == {"q1": 1, "q2": 1, "q3": 1, "q4": 1}


def test_a_failed_gate_fails_the_command_with_its_message(monkeypatch, capsys):
    def failing_bench(_settings):
        raise BenchError("results differ in q2: ...")

    monkeypatch.setattr(bench_pipeline, "bench", failing_bench)
    assert bench_pipeline.main(["--rows", "10", "--skip-spark-csv"]) == 1
    assert "bench_pipeline failed: BenchError: results differ in q2" in capsys.readouterr().err
