"""bench_clients' figures from measured runs: the aggregate over the whole span, the spread."""

from pathlib import Path

import pytest

from scripts.bench.clients import ClientRun, together_figures


def _run(name: str, rows: int, started_at: float, ended_at: float) -> ClientRun:
    summary = {"rows_sent": {"airports": 0, "flights": rows},
               "timings_s": {"upload": 1.0, "results_wait": 2.0}}
    return ClientRun(name, Path(name), started_at, ended_at, summary, cpu_s=1.5)


def test_aggregate_counts_every_row_over_first_start_to_last_end():
    runs = [_run("client-1", 1000, 100.0, 110.0), _run("client-2", 3000, 101.0, 105.0)]
    figures = together_figures(runs)
    assert figures["rows"] == 4000 and figures["span_s"] == 10.0
    assert figures["aggregate_rows_per_s"] == 400
    # client-1: 100 rows/s, client-2: 750 rows/s
    assert figures["slowest_over_fastest"] == pytest.approx(100 / 750, abs=1e-3)
    assert [r["rows_per_s"] for r in figures["runs"]] == [100, 750]
