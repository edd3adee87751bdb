"""Many clients at once against one alone, on one platform (the target: every client served
alike, none starved by the others): the library of `python -m scripts.bench_clients` (that
module says what is measured and why).

Owns one platform (the launcher's: three checkers, three brokers, the query service), the
clients' generated inputs (one sample per client, seed + i), the runs (a warm-up session, one
client alone, then all of them at once) and the correctness gate: every client's result files
equal DuckDB's on that client's own data (result_gate.py), else BenchError.
Invariants: the alone run and the together run use the same warm platform, one after the
other; the platform is stopped whatever happens.
Threads: the caller's; the clients and the platform are child processes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from scripts.bench.errors import BenchError
from scripts.bench.result_gate import gate
from scripts.launcher.layout import RunLayout
from scripts.launcher.platform import REPO, LocalPlatform, start_platform
from scripts.launcher.sample_data import InputFiles, sample_files

CLIENTS_DEFAULT = 8
ROWS_DEFAULT = 250_000
STOP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class ClientsSettings:
    clients: int
    rows: int  # per client
    seed: int
    invalid_rate: float
    work_dir: Path
    master: str


@dataclass(frozen=True)
class ClientRun:
    """One client session as measured from outside: wall-clock start and end (epoch s), its
    summary.json, and its own CPU seconds."""

    name: str
    results_dir: Path
    started_at: float
    ended_at: float
    summary: dict
    cpu_s: float

    @property
    def rows(self) -> int:
        return sum(self.summary["rows_sent"].values())

    @property
    def session_s(self) -> float:
        return self.ended_at - self.started_at

    def as_json(self) -> dict:
        timings = self.summary["timings_s"]
        return {"name": self.name, "rows": self.rows, "session_s": round(self.session_s, 2),
                "rows_per_s": round(self.rows / self.session_s),
                "upload_s": timings["upload"], "query_phase_s": timings["results_wait"],
                "client_cpu_s": round(self.cpu_s, 2)}


def _client_argv(platform: LocalPlatform, inputs: InputFiles, results_dir: Path) -> list[str]:
    return [sys.executable, "-m", "client",
            "--flights", str(inputs.flights), "--airports", str(inputs.airports),
            "--brokers", platform.brokers, "--results-dir", str(results_dir),
            "--client-id", str(uuid.uuid4()), "--rows-shown", "0"]


def run_clients(platform: LocalPlatform, named_inputs: list[tuple[str, InputFiles]],
                work_dir: Path) -> list[ClientRun]:
    """The clients started at once, each waited for; raises BenchError if one did not
    complete its session."""
    started = []
    for name, inputs in named_inputs:
        results_dir = work_dir / name
        log = open(work_dir / f"{name}.log", "wb")  # noqa: SIM115 -- closed once reaped
        process = subprocess.Popen(_client_argv(platform, inputs, results_dir), cwd=REPO,
                                   stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
        started.append((name, results_dir, time.time(), process, log))
    runs = []
    for name, results_dir, started_at, process, log in started:
        _pid, status, usage = os.wait4(process.pid, 0)
        ended_at = time.time()
        log.close()
        summary = json.loads((results_dir / "summary.json").read_text())
        if os.waitstatus_to_exitcode(status) != 0 or summary.get("status") != "completed":
            raise BenchError(f"{name}: {summary.get('status')} ({summary.get('error')}); log "
                             f"{work_dir / f'{name}.log'}")
        runs.append(ClientRun(name, results_dir, started_at, ended_at, summary,
                              usage.ru_utime + usage.ru_stime))
    return runs


def together_figures(runs: list[ClientRun]) -> dict:
    """Aggregate rows/s over the whole span (first start to last end), and the spread of the
    clients' own rows/s."""
    span_s = max(r.ended_at for r in runs) - min(r.started_at for r in runs)
    rates = [r.rows / r.session_s for r in runs]
    return {"clients": len(runs), "rows": sum(r.rows for r in runs),
            "span_s": round(span_s, 2),
            "aggregate_rows_per_s": round(sum(r.rows for r in runs) / span_s),
            "client_rows_per_s_median": round(statistics.median(rates)),
            "slowest_over_fastest": round(min(rates) / max(rates), 3),
            "upload_s_max": max(r.summary["timings_s"]["upload"] for r in runs),
            "runs": [r.as_json() for r in runs]}


def check_exact(runs: list[ClientRun], inputs: dict[str, InputFiles]) -> None:
    """Every client's results against DuckDB's on its own input (BenchError on a difference)."""
    from oracle.duckdb_queries import duckdb_queries

    for run in runs:
        reference = duckdb_queries(inputs[run.name].flights, inputs[run.name].airports).results
        gate({run.name: run.results_dir}, reference)


def bench(settings: ClientsSettings) -> dict:
    work_dir = settings.work_dir
    inputs = {f"client-{i}": sample_files(work_dir / "data" / f"client-{i}", settings.rows,
                                          settings.seed + i - 1, settings.invalid_rate)
              for i in range(1, settings.clients + 1)}
    layout = RunLayout(work_dir, work_dir / "run" / "broker-data", keep_broker_data=False)
    layout.prepare()
    platform = LocalPlatform(layout, settings.master)
    try:
        start_platform(platform)
        platform.wait_for_service()
        first = inputs["client-1"]
        # The service's first session pays the JVM's compilation: neither measured run should.
        warm_up = run_clients(platform, [("warm-up", first)], work_dir)
        alone = run_clients(platform, [("alone", first)], work_dir)
        together = run_clients(platform, list(inputs.items()), work_dir)
    finally:
        platform.stop_all(STOP_TIMEOUT_S)
    check_exact(alone + together, {"alone": first, **inputs})
    alone_run = alone[0]
    figures = together_figures(together)
    return {
        "bench": "clients", "master": settings.master, "rows_per_client": settings.rows,
        "load_average_1m": os.getloadavg()[0],
        "warm_up": warm_up[0].as_json(), "alone": alone_run.as_json(), "together": figures,
        "ratios": {
            "aggregate_over_alone": round(figures["aggregate_rows_per_s"]
                                          / (alone_run.rows / alone_run.session_s), 3),
            "slowest_over_fastest": figures["slowest_over_fastest"]},
    }


def print_table(result: dict) -> None:
    alone, together = result["alone"], result["together"]
    print(f"one client alone: {alone['rows']:,} rows in {alone['session_s']:.1f} s = "
          f"{alone['rows_per_s']:,} rows/s (upload {alone['upload_s']:.1f} s)")
    print(f"{together['clients']} clients at once: {together['rows']:,} rows in "
          f"{together['span_s']:.1f} s = {together['aggregate_rows_per_s']:,} rows/s aggregate "
          f"({result['ratios']['aggregate_over_alone']:.2f}x alone)")
    print(f"  per client: median {together['client_rows_per_s_median']:,} rows/s, slowest / "
          f"fastest {together['slowest_over_fastest']:.2f}")
    print(f"  {'client':<10} {'rows':>9} {'session s':>10} {'upload s':>9} {'query s':>8} "
          f"{'rows/s':>9} {'CPU s':>6}")
    for run in together["runs"]:
        print(f"  {run['name']:<10} {run['rows']:>9,} {run['session_s']:>10.1f} "
              f"{run['upload_s']:>9.1f} {run['query_phase_s']:>8.1f} {run['rows_per_s']:>9,} "
              f"{run['client_cpu_s']:>6.1f}")
