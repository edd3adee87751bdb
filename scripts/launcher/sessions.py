"""The client sessions of a run: planning them (names, client ids, inputs, results
directories), their command lines, reading their outcome, and the wait until all ended."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from healthchecker.local_registry import LocalServiceRegistry
from scripts.launcher import console
from scripts.launcher.config import LaunchConfig
from scripts.launcher.log_tail import LogTail
from scripts.launcher.sample_data import InputFiles, sample_files

if TYPE_CHECKING:
    from scripts.launcher.platform import LocalPlatform

WATCH_INTERVAL_S = 0.2
RESULT_FILES = ("summary.json", "q1.csv", "q2.csv", "q3.csv", "q4.csv", "report.html")


@dataclass
class ClientRun:
    name: str
    client_id: str
    results_dir: Path
    inputs: InputFiles
    outcome: str | None = None  # "completed" / "failed" / "interrupted" / "timed out"
    summary: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ClientSettings:
    """What every client of a run is started with, beyond its own session."""
    batch_rows: int | None = None  # None: the client's default (~1 MiB of CSV a message)
    partitions: int = 4
    upload_rows_per_s_max: float = 0.0  # client --upload-rows-per-s-max (0: no ceiling)


def client_argv(run: ClientRun, platform: LocalPlatform, settings: ClientSettings) -> list[str]:
    """The client's command line: the whole bootstrap list, so it rides out a broker's death."""
    return ["-m", "client", "--flights", str(run.inputs.flights), "--airports",
            str(run.inputs.airports), "--brokers", platform.brokers, "--results-dir",
            str(run.results_dir), "--client-id", run.client_id, "--name", run.name,
            *(["--batch-rows", str(settings.batch_rows)] if settings.batch_rows else []),
            "--partitions", str(settings.partitions),
            "--heartbeat-targets", platform.heartbeat_targets,
            "--upload-rows-per-s-max", str(settings.upload_rows_per_s_max),
            "--secret-file", str(platform.secret_file)]


def plan_clients(config: LaunchConfig) -> list[ClientRun]:
    """One session per client: one client writes to RESULTS_DIR, several to
    RESULTS_DIR/client-<i>; each gets its own generated sample (seed + i, `rows_of(i)` rows)
    unless files are given. Stale results are removed first."""
    runs = []
    for index in range(1, config.clients + 1):
        name = f"client-{index}"
        results_dir = config.results_dir if config.clients == 1 else config.results_dir / name
        if config.flights is not None:
            inputs = InputFiles(config.flights.resolve(), config.airports.resolve())
        else:
            sample_dir = config.results_dir / "sample"
            if config.clients > 1:
                sample_dir = sample_dir / name
            inputs = sample_files(sample_dir, config.rows_of(index), config.seed + index - 1,
                                  config.invalid_rate)
        for stale in RESULT_FILES:
            (results_dir / stale).unlink(missing_ok=True)
        runs.append(ClientRun(name, str(uuid.uuid4()), results_dir.resolve(), inputs))
    return runs


def read_client_summary(results_dir: Path) -> dict | None:
    try:
        return json.loads((results_dir / "summary.json").read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None  # never torn (written by rename); a foreign file: wait for ours


def client_outcome(run: ClientRun, registry: LocalServiceRegistry) -> str | None:
    """The session's end state, or None while it is still under way (or being restarted)."""
    summary = read_client_summary(run.results_dir)
    if summary is None or summary.get("client_id") != run.client_id:
        return None
    run.summary = summary
    record = registry.read_pid(run.name)
    if summary["status"] == "completed":
        if summary.get("results_acked") is False and record is not None and \
                record.pid == summary.get("pid") and registry.live_pid(run.name) is not None:
            return None  # the results are saved; the client is writing its ack (ms)
        return "completed"
    # A deliberate end (failure, SIGTERM) says goodbye and is not restarted; a summary from
    # an earlier, killed instance is not the end as long as the current one runs.
    if record is not None and record.pid == summary.get("pid") and \
            registry.live_pid(run.name) is None:
        return summary["status"]
    return None


def wait_for_sessions(runs: list[ClientRun], platform: LocalPlatform, timeout_s: float,
                      tail: LogTail | None, interrupted: threading.Event) -> None:
    """Until every session ended, or `timeout_s` passed, or the run was interrupted."""
    deadline = time.monotonic() + timeout_s
    while any(run.outcome is None for run in runs):
        if tail is not None:
            tail.print_new()
        for run in runs:
            if run.outcome is None:
                run.outcome = client_outcome(run, platform.registry)
                if run.outcome is not None:
                    console.say(f"session {run.name} ({run.client_id}): {run.outcome}")
        if interrupted.is_set() or time.monotonic() > deadline:
            for run in runs:
                run.outcome = run.outcome or ("interrupted" if interrupted.is_set()
                                              else f"timed out after {timeout_s:g} s")
            break
        time.sleep(WATCH_INTERVAL_S)
    if tail is not None:
        tail.print_new()
