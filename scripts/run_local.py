"""The embedded default: the whole platform as local processes on 127.0.0.1, one run of it.

    python -m scripts.run_local --results-dir DIR [--flights F --airports A] [--data-dir DIR]
        [--rows N] [--clients K] [--chaos-interval-s N] ...

1. Starts three health checkers (process backend), one Kaska broker and the query service
   (Spark `local[2]`) on free ports of 127.0.0.1. Every process is registered in a local
   service registry (DIR/run/registry, see healthchecker/local_registry.py) with its full
   command line, so the health-checker leader can restart whatever dies, and every service
   heartbeats the three checkers. Logs: DIR/run/logs/<name>.log.
2. Without --flights/--airports it generates a sample (`--rows`, default 200k, with malformed
   rows) in DIR/sample (reused when present with the same parameters); with `--clients K > 1`
   each client gets its own sample (seed + i), so each session's results are its own.
3. Runs K client sessions at once, each registered too, with a client id chosen here so that a
   restarted client resumes its session. One client writes to DIR; several to DIR/client-<i>.
4. With `--chaos-interval-s N`, runs the killer's chaos loop (local backend) for at most
   `--chaos-duration-s`: every N seconds a random live process of the deployment is SIGKILLed,
   the health-checker leader and the clients included, but never the last live health checker
   (nothing would be left to restart anything).
5. Waits until every session completed (its summary.json says so) or failed, or `--timeout-s`
   passed; then stops everything it started: health checkers first (so nothing is restarted
   meanwhile), SIGTERM, then SIGKILL after `--stop-timeout-s`.

Exit status 0 only if every session completed. Output: what started where, upload progress,
the sessions' outcome and timings, kills and restarts, where the results are.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.kaska import Admin
from common.kaska.errors import KaskaError
from healthchecker.local_registry import (
    LocalServiceRegistry,
    RegistryError,
    ServiceSpec,
    kill_process_tree,
    process_start_ticks,
)
from scripts import killer
from scripts.generate_data import AIRPORTS_FILE, FLIGHTS_FILE, generate

REPO = Path(__file__).resolve().parents[1]
HEALTHCHECKERS = 3
ROWS_DEFAULT = 200_000
SEED_DEFAULT = 1
INVALID_RATE_DEFAULT = 0.01
BROKER_READY_TIMEOUT_S = 30.0
SERVICE_READY_TIMEOUT_S = 180.0
SERVICE_READY_LINE = "query service up"
TIMEOUT_S_DEFAULT = 1800.0
STOP_TIMEOUT_S_DEFAULT = 10.0
CHAOS_DURATION_S_DEFAULT = 60.0
WATCH_INTERVAL_S = 0.2
CHECKER_PREFIX = "healthchecker-"
BROKER_NAME = "broker-1"
SERVICE_NAME = "query-service"  # the name spark.service heartbeats under
RESTART_LINE = re.compile(r"RESTARTED service=(\S+)")


class RunLocalError(Exception):
    """The platform could not be started (a service never became ready)."""


def say(text: str) -> None:
    print(text, flush=True)


def free_ports(count: int) -> list[int]:
    """Ports free for both TCP and UDP on 127.0.0.1 right now (a checker uses one for both)."""
    ports: list[int] = []
    holders: list[socket.socket] = []
    while len(ports) < count:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind(("127.0.0.1", 0))
        port = tcp.getsockname()[1]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind(("127.0.0.1", port))
        except OSError:
            tcp.close()
            udp.close()
            continue
        holders += [tcp, udp]
        ports.append(port)
    for holder in holders:
        holder.close()
    return ports


# --- the platform -----------------------------------------------------------------------------


@dataclass
class RunLayout:
    """Where a run keeps things (all under the results directory unless told otherwise)."""

    results_dir: Path
    broker_data_dir: Path
    keep_broker_data: bool

    @property
    def run_dir(self) -> Path:
        return self.results_dir / "run"

    @property
    def registry_dir(self) -> Path:
        return self.run_dir / "registry"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def prepare(self) -> None:
        """A fresh registry (stale entries would be restarted) and fresh logs."""
        for stale in (self.registry_dir, self.logs_dir):
            shutil.rmtree(stale, ignore_errors=True)
        if not self.keep_broker_data:
            shutil.rmtree(self.broker_data_dir, ignore_errors=True)
        self.logs_dir.mkdir(parents=True)


class LocalPlatform:
    """Registers, spawns, reaps and stops the processes of one run."""

    def __init__(self, layout: RunLayout, master: str) -> None:
        self.layout = layout
        self.master = master
        self.registry = LocalServiceRegistry(layout.registry_dir)
        self.checker_ports = free_ports(HEALTHCHECKERS)
        self.broker_port = free_ports(1)[0]
        self.secret_file = layout.run_dir / "secret"
        self.started: list[str] = []
        self._reapers: list[threading.Thread] = []

    @property
    def brokers(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def heartbeat_targets(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.checker_ports)

    # -- registering and spawning --------------------------------------------------------------

    def register(self, name: str, argv: list[str]) -> None:
        self.registry.register(ServiceSpec(
            name=name, argv=(sys.executable, *argv), cwd=str(REPO),
            env={"PYTHONPATH": str(REPO)}, log_file=str(self.layout.log_path(name))))

    def spawn(self, name: str, foreground: bool = False) -> int:
        """Start `name` from its spec; `foreground` shares this terminal instead of the log."""
        if foreground:
            spec = self.registry.spec(name)
            process = subprocess.Popen(list(spec.argv), cwd=spec.cwd,
                                       env={**os.environ, **spec.env},
                                       stdin=subprocess.DEVNULL, start_new_session=True)
            self.registry.write_pid(name, process.pid)
        else:
            process = self.registry.spawn(name)
        reaper = threading.Thread(target=self._reap, args=(name, process), daemon=True,
                                  name=f"reap-{name}")
        reaper.start()
        self._reapers.append(reaper)
        self.started.append(name)
        return process.pid

    def _reap(self, name: str, process: subprocess.Popen) -> None:
        # The same rule as the process restarter: a zero exit marks the service done, so that
        # no health checker restarts a finished service.
        if process.wait() == 0 and self.registry.live_pid(name) is None:
            self.registry.mark_done(name)

    def start_checkers(self) -> None:
        self.secret_file.write_text(secrets.token_hex(32))
        self.secret_file.chmod(0o600)
        peers = ",".join(f"{i}=127.0.0.1:{port}"
                         for i, port in enumerate(self.checker_ports, start=1))
        for node_id, port in enumerate(self.checker_ports, start=1):
            name = f"{CHECKER_PREFIX}{node_id}"
            self.register(name, [
                "-m", "healthchecker", "--node-id", str(node_id), "--peers", peers,
                "--listen", f"127.0.0.1:{port}", "--secret-file", str(self.secret_file),
                "--backend", "process", "--registry", str(self.layout.registry_dir),
                "--checkpoint-dir", str(self.layout.run_dir / name)])
            pid = self.spawn(name)
            say(f"  started {name:<16} pid {pid:<7} election udp + heartbeats tcp "
                f"127.0.0.1:{port}")

    def start_broker(self) -> None:
        self.register(BROKER_NAME, [
            "-m", "services.broker", "--node-id", "1", "--listen", self.brokers,
            "--data-dir", str(self.layout.broker_data_dir),
            "--heartbeat-targets", self.heartbeat_targets])
        pid = self.spawn(BROKER_NAME)
        say(f"  started {BROKER_NAME:<16} pid {pid:<7} {self.brokers}, data in "
            f"{self.layout.broker_data_dir}")

    def start_service(self) -> None:
        self.register(SERVICE_NAME, [
            "-m", "spark.service", "--brokers", self.brokers, "--master", self.master,
            "--heartbeat-targets", self.heartbeat_targets])
        pid = self.spawn(SERVICE_NAME)
        say(f"  started {SERVICE_NAME:<16} pid {pid:<7} Spark {self.master}")

    # -- readiness -------------------------------------------------------------------------

    def wait_for_broker(self) -> None:
        deadline = time.monotonic() + BROKER_READY_TIMEOUT_S
        with Admin(self.brokers, request_timeout_s=2.0, connect_timeout_s=1.0) as admin:
            while True:
                try:
                    admin.topics()
                    return
                except KaskaError as error:
                    if time.monotonic() > deadline:
                        raise RunLocalError(f"broker not ready in {BROKER_READY_TIMEOUT_S:g} s: "
                                            f"{error}; see {self.layout.log_path(BROKER_NAME)}"
                                            ) from error
                    time.sleep(0.1)

    def wait_for_service(self) -> float:
        started = time.monotonic()
        log_path = self.layout.log_path(SERVICE_NAME)
        while time.monotonic() - started < SERVICE_READY_TIMEOUT_S:
            if log_path.exists() and SERVICE_READY_LINE in log_path.read_text(errors="replace"):
                return time.monotonic() - started
            time.sleep(0.1)
        raise RunLocalError(f"query service not ready in {SERVICE_READY_TIMEOUT_S:g} s; "
                            f"see {log_path}")

    # -- stopping --------------------------------------------------------------------------

    def stop_all(self, stop_timeout_s: float) -> None:
        """Checkers first (so none restarts the rest), then clients, the query service, and the
        broker last (the others talk to it while they stop): SIGTERM, wait, SIGKILL what is
        left (with its process group)."""
        names = self.registry.names()
        checkers = [n for n in names if n.startswith(CHECKER_PREFIX)]
        last = [n for n in (SERVICE_NAME, BROKER_NAME) if n in names]
        clients = [n for n in names if n not in checkers and n not in last]
        for group in (checkers, clients, *([n] for n in last)):
            self._stop_group(group, stop_timeout_s)
        for reaper in self._reapers:
            reaper.join(timeout=1.0)

    def _stop_group(self, names: list[str], stop_timeout_s: float) -> None:
        running = {}
        for name in names:
            pid = self.registry.live_pid(name)
            if pid is not None:
                running[name] = (pid, process_start_ticks(pid))
                _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + stop_timeout_s
        while running and time.monotonic() < deadline:
            running = {n: (pid, ticks) for n, (pid, ticks) in running.items()
                       if process_start_ticks(pid) == ticks}
            time.sleep(0.05)
        for name, (pid, _ticks) in running.items():
            say(f"  {name} (pid {pid}) ignored SIGTERM for {stop_timeout_s:g} s: SIGKILL")
            kill_process_tree(pid)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it ended between the liveness check and the signal


# --- data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputFiles:
    flights: Path
    airports: Path


def sample_files(directory: Path, rows: int, seed: int, invalid_rate: float) -> InputFiles:
    """Generated data in `directory`, reused when it was made with the same parameters."""
    files = InputFiles(directory / FLIGHTS_FILE, directory / AIRPORTS_FILE)
    marker = directory / "sample.json"
    wanted = {"rows": rows, "seed": seed, "invalid_rate": invalid_rate}
    if files.flights.exists() and files.airports.exists() and marker.exists() and \
            json.loads(marker.read_text()) == wanted:
        say(f"  reusing the sample in {directory} ({rows:,} rows, seed {seed})")
        return files
    report = generate(directory, rows=rows, seed=seed, invalid_rate=invalid_rate)
    marker.write_text(json.dumps(wanted))
    say(f"  generated {rows:,} rows (seed {seed}, {report.invalid_total:,} malformed) in "
        f"{directory} in {report.seconds:.1f} s")
    return files


# --- sessions ---------------------------------------------------------------------------------


@dataclass
class ClientRun:
    name: str
    client_id: str
    results_dir: Path
    inputs: InputFiles
    outcome: str | None = None  # "completed" / "failed" / "interrupted" / "timed out"
    summary: dict = field(default_factory=dict)


def client_argv(run: ClientRun, platform: LocalPlatform, args: argparse.Namespace) -> list[str]:
    return ["-m", "client", "--flights", str(run.inputs.flights), "--airports",
            str(run.inputs.airports), "--brokers", platform.brokers, "--results-dir",
            str(run.results_dir), "--client-id", run.client_id, "--name", run.name,
            "--batch-rows", str(args.batch_rows), "--partitions", str(args.partitions),
            "--heartbeat-targets", platform.heartbeat_targets]


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
    if summary["status"] == "completed":
        return "completed"
    # A deliberate end (failure, SIGTERM) says goodbye and is not restarted; a summary from
    # an earlier, killed instance is not the end as long as the current one runs.
    record = registry.read_pid(run.name)
    if record is not None and record.pid == summary.get("pid") and \
            registry.live_pid(run.name) is None:
        return summary["status"]
    return None


class LogTail:
    """Prints the new lines of some log files, prefixed with their service name."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.offsets = dict.fromkeys(paths, 0)

    def print_new(self) -> None:
        for name, path in self.paths.items():
            if not path.exists():
                continue
            with open(path, "rb") as file:
                file.seek(self.offsets[name])
                data = file.read()
            complete = data[:data.rfind(b"\n") + 1]
            self.offsets[name] += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                say(f"[{name}] {line}")


# --- chaos ------------------------------------------------------------------------------------


class _PrefixedLines:
    """A text stream that prints each line with a prefix (the chaos loop's output)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                say(f"{self.prefix} {line}")
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()


class ChaosThread:
    """`killer.chaos` on a thread, never killing the last live health checker (nothing would
    be left to restart anything); `stop()` ends it at its next wake-up."""

    def __init__(self, backend: killer.Backend, interval_s: float, duration_s: float,
                 seed: int | None) -> None:
        self.stop_event = threading.Event()
        self.kills: list[killer.Kill] = []

        def clock() -> float:
            # Once stopped, time jumps past the duration: the loop ends instead of killing.
            return time.monotonic() + (duration_s + interval_s if self.stop_event.is_set() else 0)

        def run() -> None:
            spared = killer.SpareLastBackend(backend, [CHECKER_PREFIX])
            self.kills = killer.chaos(spared, interval_s,
                                      duration_s, rng=random.Random(seed), clock=clock,
                                      sleep=self.stop_event.wait, out=_PrefixedLines("[chaos]"))

        self.thread = threading.Thread(target=run, name="chaos", daemon=True)

    def start(self) -> ChaosThread:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)


def restarts_in_logs(layout: RunLayout) -> Counter:
    restarts: Counter = Counter()
    for node_id in range(1, HEALTHCHECKERS + 1):
        path = layout.log_path(f"{CHECKER_PREFIX}{node_id}")
        if path.exists():
            restarts.update(RESTART_LINE.findall(path.read_text(errors="replace")))
    return restarts


# --- the run ----------------------------------------------------------------------------------


def plan_clients(args: argparse.Namespace) -> list[ClientRun]:
    runs = []
    for index in range(1, args.clients + 1):
        name = f"client-{index}"
        results_dir = args.results_dir if args.clients == 1 else args.results_dir / name
        if args.flights is not None:
            inputs = InputFiles(args.flights.resolve(), args.airports.resolve())
        else:
            sample_dir = args.results_dir / "sample"
            if args.clients > 1:
                sample_dir = sample_dir / name
            inputs = sample_files(sample_dir, args.rows, args.seed + index - 1,
                                  args.invalid_rate)
        for stale in ("summary.json", "q1.csv", "q2.csv", "q3.csv", "q4.csv", "report.html"):
            (results_dir / stale).unlink(missing_ok=True)
        runs.append(ClientRun(name, str(uuid.uuid4()), results_dir.resolve(), inputs))
    return runs


def wait_for_sessions(runs: list[ClientRun], platform: LocalPlatform, timeout_s: float,
                      tail: LogTail | None, interrupted: threading.Event) -> None:
    deadline = time.monotonic() + timeout_s
    while any(run.outcome is None for run in runs):
        if tail is not None:
            tail.print_new()
        for run in runs:
            if run.outcome is None:
                run.outcome = client_outcome(run, platform.registry)
                if run.outcome is not None:
                    say(f"session {run.name} ({run.client_id}): {run.outcome}")
        if interrupted.is_set() or time.monotonic() > deadline:
            for run in runs:
                run.outcome = run.outcome or ("interrupted" if interrupted.is_set()
                                              else f"timed out after {timeout_s:g} s")
            break
        time.sleep(WATCH_INTERVAL_S)
    if tail is not None:
        tail.print_new()


def describe_session(run: ClientRun) -> list[str]:
    summary = run.summary
    if run.outcome != "completed":
        return [f"  {run.name}: {run.outcome}: {summary.get('error') or ''}".rstrip()]
    sent = summary["rows_sent"]
    rejected = sum(n for kinds in summary["rows_rejected"].values() for n in kinds.values())
    invalid = summary["rows_invalid_for_queries"].get("q4", {})
    rows = ", ".join(f"{q} {n:,}" for q, n in summary["rows_per_query"].items())
    return [
        f"  {run.name}: {sent.get('flights', 0):,} flights and {sent.get('airports', 0):,} "
        f"airports sent, {rejected:,} rows rejected by the reader, "
        f"{sum(invalid.values()):,} invalid for the queries",
        f"    results: {rows}",
        f"    {describe_timings(summary)}",
        f"    files: {run.results_dir}/q1.csv ... q4.csv, summary.json, report.html",
    ]


def describe_timings(summary: dict) -> str:
    timings = summary["timings_s"]
    phases = [f"{label} {timings[key]:.1f} s" for key, label in (
        ("upload", "upload"), ("results_wait", "query (upload end to last result)"),
        ("total", "total")) if key in timings]
    resumed = " (a resumed client: earlier instances did the rest)" if summary["resumed"] else ""
    return f"the client's last run: {', '.join(phases)}{resumed}"


def start_platform(platform: LocalPlatform, args: argparse.Namespace) -> None:
    say(f"starting the platform on 127.0.0.1 (logs in {platform.layout.logs_dir})")
    platform.start_checkers()
    platform.start_broker()
    platform.wait_for_broker()
    platform.start_service()


def run(args: argparse.Namespace, interrupted: threading.Event) -> int:
    started = time.monotonic()
    layout = RunLayout(args.results_dir.resolve(),
                       (args.data_dir or args.results_dir / "run" / "broker-data").resolve(),
                       keep_broker_data=args.data_dir is not None)
    layout.prepare()
    platform = LocalPlatform(layout, args.master)
    chaos = None
    try:
        start_platform(platform, args)
        runs = plan_clients(args)  # generates samples while Spark starts
        say(f"  query service ready after {platform.wait_for_service():.1f} s")
        if args.chaos_interval_s:
            say(f"chaos: a SIGKILL every {args.chaos_interval_s:g} s for at most "
                f"{args.chaos_duration_s:g} s")
            chaos = ChaosThread(killer.LocalBackend(layout.registry_dir), args.chaos_interval_s,
                                args.chaos_duration_s, args.chaos_seed).start()
        sessions_started = time.monotonic()
        foreground = len(runs) == 1 and chaos is None and sys.stdout.isatty()
        for client in runs:
            platform.register(client.name, client_argv(client, platform, args))
            pid = platform.spawn(client.name, foreground=foreground)
            say(f"  started {client.name:<16} pid {pid:<7} session {client.client_id}")
        tail = None if foreground else LogTail({r.name: layout.log_path(r.name) for r in runs})
        wait_for_sessions(runs, platform, args.timeout_s, tail, interrupted)
        sessions_s = time.monotonic() - sessions_started
    finally:
        if chaos is not None:
            chaos.stop()
        say("stopping everything this run started")
        platform.stop_all(args.stop_timeout_s)
    return report(runs, layout, chaos, sessions_s, time.monotonic() - started)


def report(runs: list[ClientRun], layout: RunLayout, chaos: ChaosThread | None,
           sessions_s: float, total_s: float) -> int:
    completed = sum(run.outcome == "completed" for run in runs)
    say(f"\n{completed} of {len(runs)} sessions completed; sessions took {sessions_s:.1f} s, "
        f"the whole run {total_s:.1f} s")
    for run in runs:
        for line in describe_session(run):
            say(line)
    if chaos is not None:
        killed = Counter(kill.name for kill in chaos.kills)
        restarts = restarts_in_logs(layout)
        say(f"chaos: {len(chaos.kills)} kills {dict(sorted(killed.items()))}; health-checker "
            f"restarts {dict(sorted(restarts.items()))}")
    say(f"logs: {layout.logs_dir}")
    return 0 if completed == len(runs) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.run_local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--results-dir", type=Path, required=True)
    add("--flights", type=Path, help="itineraries CSV (default: a generated sample)")
    add("--airports", type=Path, help="airports CSV (with --flights)")
    add("--data-dir", type=Path, help="keep the broker's data here (default: fresh, under "
        "RESULTS_DIR/run)")
    add("--rows", type=int, default=ROWS_DEFAULT, help="rows of the generated sample")
    add("--seed", type=int, default=SEED_DEFAULT)
    add("--invalid-rate", type=float, default=INVALID_RATE_DEFAULT,
        help="share of malformed rows in the generated sample")
    add("--clients", type=int, default=1)
    add("--batch-rows", type=int, default=300)
    add("--partitions", type=int, default=4)
    add("--master", default="local[2]")
    add("--chaos-interval-s", type=float, default=0.0, help="SIGKILL a random process every N s")
    add("--chaos-duration-s", type=float, default=CHAOS_DURATION_S_DEFAULT)
    add("--chaos-seed", type=int)
    add("--timeout-s", type=float, default=TIMEOUT_S_DEFAULT)
    add("--stop-timeout-s", type=float, default=STOP_TIMEOUT_S_DEFAULT)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.flights is None) != (args.airports is None):
        parser.error("--flights and --airports go together")
    if args.clients < 1 or args.rows < 0 or args.batch_rows < 1 or args.partitions < 1:
        parser.error("--clients, --batch-rows and --partitions must be >= 1, --rows >= 0")
    if args.chaos_interval_s < 0 or args.chaos_duration_s < 0:
        parser.error("chaos interval and duration must be >= 0")
    return args


def install_signal_handlers(interrupted: threading.Event) -> Callable[[], None]:
    previous = {signum: signal.signal(signum, lambda *_: interrupted.set())
                for signum in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interrupted = threading.Event()
    restore = install_signal_handlers(interrupted)
    try:
        return run(args, interrupted)
    except (RunLocalError, RegistryError, OSError) as error:
        say(f"run_local failed: {error}")
        return 1
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
