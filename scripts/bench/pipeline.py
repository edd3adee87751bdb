"""The pipeline against Spark and DuckDB reading the CSV themselves: the library of
`python -m scripts.bench_pipeline` (scripts/bench_pipeline.py says what each step measures).

Owns the three runs (`run_pipeline` on the launcher's platform with the real client,
`run_spark_csv` in a child process, `run_duckdb`), the disk and process sampling around them,
the correctness gate over their results (result_gate.py) and the ratios.
Invariants: the runs go one after the other, each with the machine to itself; every session's
results equal DuckDB's as multisets of rows, and every result count agrees with Spark's
(BenchError otherwise); the platform is stopped whatever happens.
Threads: the caller's, plus one DiskPeak sampler thread during a session; Spark and the
platform run as child processes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from scripts.bench.errors import BenchError
from scripts.bench.kernel_profile import KernelProfiler
from scripts.bench.process_stats import (
    PeakRssWatch,
    TreeStats,
    descendants,
    disk_bytes,
    tree_stats,
)
from scripts.bench.profile import RATE_HZ_DEFAULT, SessionProfiler, format_summary
from scripts.bench.result_gate import GateReport, gate
from scripts.bench.spark_stages import StageCost, format_stage_costs, session_stage_costs
from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE
from scripts.launcher.layout import SERVICE_NAME, RunLayout
from scripts.launcher.platform import REPO, LocalPlatform, start_platform
from scripts.launcher.sample_data import InputFiles, sample_files

ROWS_DEFAULT = 2_000_000
SESSION_TIMEOUT_S = 3600.0
TOPICS_GONE_TIMEOUT_S_DEFAULT = 120.0
POLL_S = 0.5
DISK_SAMPLE_S = 0.5
STOP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class PipelineSettings:
    """One run: the input (given files, or a sample of `rows` generated with `seed`), the
    platform's Spark master, the warm sessions after the first, and which peers to skip."""

    rows: int
    seed: int
    invalid_rate: float
    data_dir: Path | None  # input files (generated there when absent); None: a temporary one
    work_dir: Path | None  # None: a fresh temporary directory
    warm_sessions: int
    master: str
    skip_spark_csv: bool
    skip_duckdb: bool
    topics_gone_timeout_s: float
    # py-spy on every process of each session, files in profile_dir/session-<i>/ (profile.py);
    # its sampling costs CPU, so a profiled run's timings are not the yardstick.
    profile_dir: Path | None = None
    profile_rate_hz: int = RATE_HZ_DEFAULT
    profile_gil: bool = False  # py-spy --gil: only the GIL's holder (profile.py says why)
    # Linux perf on every process of each session (kernel_profile.py): where the CPU goes,
    # the kernel's page faults and system calls included; files in perf_dir/session-<i>/.
    perf_dir: Path | None = None
    warm_up_idle_passes: int | None = None  # the query service's flag; None: its default
    # Start the first session only once the service's idle warm-up passes are over: a client
    # that comes some time after the service is up (by default it comes at once).
    after_idle_warm_up: bool = False
    client_slice_bytes: int | None = None  # the client's --slice-bytes; None: its default


IDLE_WARM_UP_TIMEOUT_S = 600.0
IDLE_WARM_UP_POLL_S = 0.2


# --- pipeline ---------------------------------------------------------------------------------


def _client_argv(platform: LocalPlatform, flights: Path, airports: Path,
                 results_dir: Path, slice_bytes: int | None = None) -> list[str]:
    extra = [] if slice_bytes is None else ["--slice-bytes", str(slice_bytes)]
    return [sys.executable, "-m", "client", "--flights", str(flights), "--airports",
            str(airports), "--brokers", platform.brokers, "--results-dir", str(results_dir),
            "--client-id", str(uuid.uuid4()), "--rows-shown", "0", *extra]


def _run_client(argv: list[str], log_path: Path,
                on_start: Callable[[int], None] | None = None) -> dict:
    """The client as a child process; its summary plus its CPU seconds and peak RSS.
    `on_start(pid)` runs as soon as it is started (a profiler attaching)."""
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(argv, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
        watch = PeakRssWatch(process.pid)
        if on_start is not None:
            on_start(process.pid)
        # WNOWAIT: the child stays an unreaped zombie until the watch has stopped, so its pid
        # cannot be reused by another process the watch would read.
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        peak_bytes = watch.stop()
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    results_dir = Path(argv[argv.index("--results-dir") + 1])
    summary = json.loads((results_dir / "summary.json").read_text())
    if process.returncode != 0 or summary.get("status") != "completed":
        raise BenchError(f"client exited {process.returncode} ({summary.get('status')}: "
                         f"{summary.get('error')}); log {log_path}")
    summary["client_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
    summary["client_peak_rss_bytes"] = peak_bytes  # not ru_maxrss: process_stats.PeakRssWatch
    return summary


class DiskPeak:
    """The largest disk use of a directory, sampled every DISK_SAMPLE_S while in the block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="disk-peak")

    def _sample(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, disk_bytes(self.directory))
            if self._stop.wait(DISK_SAMPLE_S):
                return

    def __enter__(self) -> DiskPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()


def _platform_stats(platform: LocalPlatform) -> dict[str, TreeStats]:
    stats = {}
    for name in platform.registry.names():
        pid = platform.registry.live_pid(name)
        if pid is not None:
            stats[name] = tree_stats(pid)
    return stats


def _session_dirs(directory: Path, client_id: str) -> list[Path]:
    """What the brokers still hold of a session: its topics' directories, or their deleted
    remains (a topic directory is named by the topic; deletion renames it first)."""
    # os.walk, not rglob: a directory the brokers delete while this walks is skipped.
    return [Path(root) / name for root, dirs, files in os.walk(directory)
            for name in (*dirs, *files) if client_id in name]


def _journal_bytes(directory: Path) -> dict[str, int]:
    """Each broker's replication journal file size (`<broker>/@replication/journal.log`),
    by broker directory: what compaction keeps bounded over many sessions."""
    sizes = {}
    for path in sorted(directory.glob("*/@replication/journal.log")):
        try:
            sizes[path.parent.parent.name] = path.stat().st_size
        except FileNotFoundError:
            continue  # rewritten by a compaction as we looked (temp file, rename)
    return sizes


def _wait_for_cleanup(directory: Path, client_id: str, timeout_s: float) -> tuple[int, float]:
    """Until no broker holds anything of the session (or the timeout): (bytes left, seconds)."""
    started = time.monotonic()
    while _session_dirs(directory, client_id) and time.monotonic() - started < timeout_s:
        time.sleep(POLL_S)
    return disk_bytes(directory), time.monotonic() - started


def run_pipeline(settings: PipelineSettings, flights: Path, airports: Path,
                 work_dir: Path) -> dict:
    layout = RunLayout(work_dir, work_dir / "run" / "broker-data", keep_broker_data=False)
    layout.prepare()
    service_argv_extra = () if settings.warm_up_idle_passes is None else (
        "--warm-up-idle-passes", str(settings.warm_up_idle_passes))
    platform = LocalPlatform(layout, settings.master, service_argv_extra=service_argv_extra)
    sessions = []
    try:
        started = time.monotonic()
        start_platform(platform)
        ready_s = platform.wait_for_service()
        platform_ready_s = time.monotonic() - started
        idle_warm_up_s = (_wait_for_idle_warm_up(layout)
                          if settings.after_idle_warm_up and settings.warm_up_idle_passes != 0
                          else None)
        for index in range(1 + settings.warm_sessions):
            sessions.append(_one_session(settings, platform, layout, flights, airports, work_dir,
                                         index))
        processes = {name: stats.__dict__ for name, stats in _platform_stats(platform).items()}
    finally:
        platform.stop_all(STOP_TIMEOUT_S)
    return {"platform_ready_s": round(platform_ready_s, 1),
            "query_service_ready_s": round(ready_s, 1),
            "idle_warm_up": _idle_warm_up_line(layout), "idle_warm_up_waited_s": idle_warm_up_s,
            "sessions": sessions,
            "processes_at_end": processes}


def _wait_for_idle_warm_up(layout: RunLayout) -> float:
    """Seconds until the service logged the end of its idle warm-up passes."""
    started = time.monotonic()
    while _idle_warm_up_line(layout) is None:
        if time.monotonic() - started > IDLE_WARM_UP_TIMEOUT_S:
            raise BenchError(f"the query service's idle warm-up did not end within "
                             f"{IDLE_WARM_UP_TIMEOUT_S:g} s")
        time.sleep(IDLE_WARM_UP_POLL_S)
    return round(time.monotonic() - started, 1)


def _idle_warm_up_line(layout: RunLayout) -> str | None:
    """The service's account of its idle warm-up passes (how many ran before the first
    session came), or None when it logged none."""
    text = layout.log_path(SERVICE_NAME).read_text(errors="replace")
    lines = [line for line in text.splitlines() if "idle warm-up:" in line]
    return lines[-1].split("idle warm-up:", 1)[1].strip() if lines else None


def _one_session(settings: PipelineSettings, platform: LocalPlatform, layout: RunLayout,
                 flights: Path, airports: Path, work_dir: Path, index: int) -> dict:
    results_dir = work_dir / f"session-{index}"
    disk_before = disk_bytes(layout.brokers_data_dir)
    profiler = _session_profiler(settings, platform, index)
    kernel_profiler = _session_kernel_profiler(settings, platform, index)
    cpu_before = _platform_stats(platform)
    with DiskPeak(layout.brokers_data_dir) as disk_peak, profiler or nullcontext(), \
            kernel_profiler or nullcontext():
        summary = _run_client(_client_argv(platform, flights, airports, results_dir,
                                           settings.client_slice_bytes),
                              work_dir / f"client-{index}.log",
                              on_start=partial(_attach_client, profiler, kernel_profiler))
    cpu_after = _platform_stats(platform)
    stages = session_stage_costs(platform.spark_ui_url, f"session-{summary['client_id']}")
    disk_end = disk_bytes(layout.brokers_data_dir)
    disk_after, waited = _wait_for_cleanup(layout.brokers_data_dir, summary["client_id"],
                                           settings.topics_gone_timeout_s)
    timings = summary["timings_s"]
    rows = sum(summary["rows_sent"].values())
    upload_s = timings["upload"]
    return {
        "service": "fresh" if index == 0 else "warm",
        "results_dir": str(results_dir),
        "rows": rows,
        "upload_s": upload_s,
        "query_phase_s": timings["results_wait"],
        "session_s": timings["total"],
        "upload_rows_per_s": round(rows / upload_s) if upload_s else None,
        "result_rows": summary["rows_per_query"],
        "client_cpu_s": summary["client_cpu_s"],
        "client_peak_rss_bytes": summary["client_peak_rss_bytes"],
        "platform_cpu_s": {name: round(cpu_after[name].cpu_s - cpu_before[name].cpu_s, 2)
                           for name in cpu_after if name in cpu_before},
        "spark_stages": [stage.__dict__ for stage in stages],
        "broker_disk_bytes": {"before": disk_before, "peak": disk_peak.peak_bytes,
                              "session_end": disk_end,
                              "after_cleanup": disk_after,
                              "cleanup_wait_s": round(waited, 1),
                              "session_files_left": len(_session_dirs(layout.brokers_data_dir,
                                                                      summary["client_id"]))},
        "journal_bytes": _journal_bytes(layout.brokers_data_dir),
        **({"profile": {name: profile.as_json() for name, profile in profiler.profiles.items()}}
           if profiler else {}),
        **({"kernel_profile": {name: profile.as_json()
                               for name, profile in kernel_profiler.profiles.items()},
            "kernel_profile_lines": [profile.line()
                                     for profile in kernel_profiler.profiles.values()]}
           if kernel_profiler else {}),
    }


def _attach_client(profiler: SessionProfiler | None, kernel_profiler: KernelProfiler | None,
                   pid: int) -> None:
    if profiler is not None:
        profiler.attach("client", pid)
    if kernel_profiler is not None:
        kernel_profiler.start("client", pid)


def _session_kernel_profiler(settings: PipelineSettings, platform: LocalPlatform,
                             index: int) -> KernelProfiler | None:
    """perf on every live platform process tree (the query service with its JVM and Python
    workers as one), the client attached when it starts; None when no `--perf` was asked."""
    if settings.perf_dir is None:
        return None
    profiler = KernelProfiler(settings.perf_dir / f"session-{index}")
    for name in platform.registry.names():
        pid = platform.registry.live_pid(name)
        if pid is not None:
            profiler.start(name, descendants(pid))
    return profiler


def _session_profiler(settings: PipelineSettings, platform: LocalPlatform,
                      index: int) -> SessionProfiler | None:
    """py-spy already sampling every live platform process (the client is attached when it
    starts), or None when no profile was asked for."""
    if settings.profile_dir is None:
        return None
    profiler = SessionProfiler(settings.profile_dir / f"session-{index}",
                               settings.profile_rate_hz, settings.profile_gil)
    for name in platform.registry.names():
        pid = platform.registry.live_pid(name)
        if pid is not None:
            profiler.attach(name, pid)
    return profiler


# --- Spark reading the CSV itself ---------------------------------------------------------------


def spark_csv_child(flights: Path, airports: Path, master: str) -> dict:
    """In a fresh process: start Spark, then Q1-Q4 over the CSV files, timed apart."""
    started = time.monotonic()
    from pyspark.sql import SparkSession

    from scripts.bench.spark_csv import compute_all, read_airports_csv, read_flights_csv
    from spark.rules.query_frames import SESSION_CONFIG
    from spark.rules.result_columns import format_table

    spark = (SparkSession.builder.master(master).appName("bench-pipeline-csv")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "2g")
             # The query service's tuning too: the comparison is of the paths, not settings.
             .config(map=SESSION_CONFIG).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_start_s = time.monotonic() - started
    queries_started = time.monotonic()
    results = compute_all(read_flights_csv(spark, str(flights)),
                          read_airports_csv(spark, str(airports)))
    # Collected as Arrow and formatted a column at a time, as the service formats its rows
    # (spark/rules/result_order.py), in one piece: nothing here bounds the driver's memory.
    counts = {query: len(format_table(query, frame.toArrow()))
              for query, frame in results.frames().items()}
    results.release()
    queries_s = time.monotonic() - queries_started
    spark.stop()
    return {"spark_start_s": round(spark_start_s, 2), "queries_s": round(queries_s, 2),
            "result_rows": counts}


def run_spark_csv(flights: Path, airports: Path, master: str) -> dict:
    started = time.monotonic()
    output = subprocess.run(
        [sys.executable, "-m", "scripts.bench_pipeline", "--spark-csv-child", "--flights",
         str(flights), "--airports", str(airports), "--master", master],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        check=False)
    if output.returncode != 0:
        raise BenchError(f"spark-csv child failed: {output.stderr[-2000:]}")
    result = json.loads(output.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.monotonic() - started, 2)
    return result


def run_duckdb(flights: Path, airports: Path) -> tuple[dict, dict[str, list[tuple]]]:
    """DuckDB's timings and counts (for the JSON line), and its result rows (for the gate)."""
    from oracle.duckdb_queries import duckdb_queries

    run = duckdb_queries(flights, airports)
    seconds = {"load": round(run.load_seconds, 2), "queries": round(run.query_seconds, 2),
               "total": round(run.total_seconds, 2)}
    return {"seconds": seconds, "result_rows": run.result_counts()}, run.results


# --- the report ---------------------------------------------------------------------------------


def _session_name(index: int, session: dict) -> str:
    return f"session {index} ({session['service']})"


def check_results(result: dict, duckdb_rows: dict[str, list[tuple]] | None) -> GateReport:
    """The gate (result_gate.py): every session's files against DuckDB's rows, or against the
    first session's when DuckDB was skipped (None)."""
    session_dirs = {_session_name(i, s): Path(s["results_dir"])
                    for i, s in enumerate(result["pipeline"]["sessions"])}
    return gate(session_dirs, duckdb_rows)


def _check_counts(result: dict) -> None:
    """Spark reading the CSV reports counts only: they must agree with everyone's."""
    seen = {_session_name(i, s): s["result_rows"]
            for i, s in enumerate(result["pipeline"]["sessions"])}
    for other in ("spark_csv", "duckdb"):
        if other in result:
            seen[other] = result[other]["result_rows"]
    distinct = {json.dumps(counts, sort_keys=True) for counts in seen.values()}
    if len(distinct) != 1:
        raise BenchError(f"result counts disagree: {seen}")


def ratios(result: dict) -> dict:
    sessions = result["pipeline"]["sessions"]
    fresh = sessions[0]["session_s"]
    warm = statistics.median(s["session_s"] for s in sessions[1:]) if len(sessions) > 1 \
        else None
    out = {"fresh_session_s": fresh, "warm_session_s": warm,
           "upload_rows_per_s": sessions[0]["upload_rows_per_s"]}
    if "spark_csv" in result:
        out["fresh_session_over_spark_csv"] = round(fresh / result["spark_csv"]["queries_s"], 3)
    if "duckdb" in result:
        out["fresh_session_over_duckdb"] = round(fresh / result["duckdb"]["seconds"]["total"], 2)
    return out


def print_table(result: dict) -> None:
    pipeline = result["pipeline"]
    waited_s = pipeline.get("idle_warm_up_waited_s")
    print(f"query service ready after {pipeline['query_service_ready_s']:.1f} s; idle warm-up: "
          f"{pipeline.get('idle_warm_up') or 'none logged'}"
          + ("" if waited_s is None else f"; the first session waited {waited_s:.1f} s for it"))
    print(f"{'what':<44}{'seconds':>10}  notes")
    for i, s in enumerate(result["pipeline"]["sessions"]):
        what = f"pipeline session {i} ({s['service']} query service)"
        print(f"{what:<44}{s['session_s']:>10.1f}  upload {s['upload_s']:.1f} s "
              f"({s['upload_rows_per_s']:,} rows/s), query phase {s['query_phase_s']:.1f} s")
    if "spark_csv" in result:
        csv = result["spark_csv"]
        print(f"{'Spark reading the CSV, fresh app: queries':<44}{csv['queries_s']:>10.1f}  "
              f"+ {csv['spark_start_s']:.1f} s to start Spark")
    if "duckdb" in result:
        print(f"{'DuckDB, load + Q1-Q4':<44}{result['duckdb']['seconds']['total']:>10.1f}")
    for name, value in result["ratios"].items():
        print(f"  {name}: {value}")
    print(result["result_gate"]["line"])
    _print_cpu_table(result["pipeline"]["sessions"])
    for i, s in enumerate(result["pipeline"]["sessions"]):
        if "profile" in s:
            print(f"profile of session {i} ({s['service']}): self time by function, py-spy"
                  + (" --gil" if result.get("profile_gil") else ""))
            cpu_s = {**s["platform_cpu_s"], "client": s["client_cpu_s"]}
            for name, profile in s["profile"].items():
                print("\n".join(format_summary(name, profile, cpu_s.get(name))))
        if "kernel_profile_lines" in s:
            print(f"kernel profile of session {i} ({s['service']}), perf: shares of each "
                  "process's samples")
            for line in s["kernel_profile_lines"]:
                print(f"  {line}")


def _print_cpu_table(sessions: list[dict]) -> None:
    """CPU seconds per process and session, then the query service's JVM by Spark stage."""
    cpu = [{**s["platform_cpu_s"], "client": s["client_cpu_s"]} for s in sessions]
    names = sorted(cpu[0], key=lambda name: -cpu[0][name])
    heads = "".join(f"{f'session {i}':>12}" for i in range(len(sessions)))
    print(f"CPU seconds per process\n  {'process':<30}{heads}")
    for name in names:
        print(f"  {name:<30}" + "".join(f"{c.get(name, 0.0):>12.2f}" for c in cpu))
    print(f"  {'all processes':<30}" + "".join(f"{sum(c.values()):>12.2f}" for c in cpu))
    for i, s in enumerate(sessions):
        print(f"session {i} ({s['service']}): Spark stages of its jobs")
        print("\n".join(format_stage_costs([StageCost(**c) for c in s["spark_stages"]])))


def bench(settings: PipelineSettings) -> dict:
    data_dir = settings.data_dir or Path(tempfile.gettempdir()) / f"bench-pipeline-{settings.rows}"
    if (data_dir / FLIGHTS_FILE).exists() and (data_dir / AIRPORTS_FILE).exists():
        files = InputFiles(data_dir / FLIGHTS_FILE, data_dir / AIRPORTS_FILE)  # given data
    else:
        files = sample_files(data_dir, settings.rows, settings.seed, settings.invalid_rate)
    work_dir = settings.work_dir or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    result = {"bench": "pipeline", "rows": settings.rows, "master": settings.master,
              "profile_gil": settings.profile_gil,
              "load_average_1m_at_start": round(os.getloadavg()[0], 2)}
    result["pipeline"] = run_pipeline(settings, files.flights, files.airports, work_dir)
    if not settings.skip_spark_csv:
        result["spark_csv"] = run_spark_csv(files.flights, files.airports, settings.master)
    duckdb_rows = None
    if not settings.skip_duckdb:
        result["duckdb"], duckdb_rows = run_duckdb(files.flights, files.airports)
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    report = check_results(result, duckdb_rows)  # rows first: it says which rows differ
    result["result_gate"] = {"reference": report.reference, "sessions": report.sessions,
                             "rows": report.rows, "line": report.line()}
    _check_counts(result)
    result["ratios"] = ratios(result)
    return result
