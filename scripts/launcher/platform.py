"""LocalPlatform: the processes of one run. Registers each with the local service registry
(healthchecker/local_registry.py: full command line, working directory, log file) so that the
health-checker leader can restart whatever dies, spawns and reaps them, waits until they are
ready, and stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.cluster_secret import write_secret_file
from healthchecker.local_registry import (
    LocalServiceRegistry,
    ServiceSpec,
    kill_process_tree,
    process_start_ticks,
)
from scripts.launcher import console
from scripts.launcher.brokers import (
    BROKERS_DEFAULT,
    bootstrap_list,
    broker_spec,
    plan_brokers,
    wait_for_leader,
    wait_until_listening,
)
from scripts.launcher.errors import RunLocalError
from scripts.launcher.layout import (
    BROKER_PREFIX,
    CHECKER_PREFIX,
    SERVICE_NAME,
    STATUS_NAME,
    RunLayout,
    checker_name,
)
from scripts.launcher.local_cluster import broker_argv
from scripts.launcher.ports import free_ports
from scripts.launcher.prometheus_targets import BROKER_JOB, CHECKER_JOB, SERVICE_JOB

REPO = Path(__file__).resolve().parents[2]
HEALTHCHECKERS = 3
# The query service is ready once its JVM started and its warm-up session ran: tens of seconds
# on a quiet machine, minutes on a loaded one (a fixed bound much below the run's own deadline
# failed runs that were merely slow), so callers pass their own deadline when they have one.
SERVICE_READY_TIMEOUT_S = 600.0
SERVICE_READY_LINE = "query service up"
POLL_S = 0.1
STOP_POLL_S = 0.05
REAPER_JOIN_S = 1.0


class LocalPlatform:
    """Registers, spawns, reaps and stops the processes of one run: `HEALTHCHECKERS` health
    checkers, `broker_count` brokers, the query service, the status page and the clients.

    Ports, all on 127.0.0.1: per checker one for election and heartbeats, one for its status
    request and one for /metrics; per broker one for Kaska and one for /metrics (the status
    page reads both); the page itself (`status_port`, 0: a free one), the query service's Spark
    UI and its /metrics."""

    def __init__(self, layout: RunLayout, master: str,
                 broker_count: int = BROKERS_DEFAULT, status_port: int = 0,
                 service_argv_extra: tuple[str, ...] = ()) -> None:
        self.layout = layout
        self.master = master
        self.service_argv_extra = service_argv_extra  # more `spark.service` flags (benchmarks)
        self.registry = LocalServiceRegistry(layout.registry_dir)
        # One call: distinct ports.
        ports = free_ports(3 * HEALTHCHECKERS + 2 * broker_count + 3)
        self.checker_ports = ports[:HEALTHCHECKERS]
        self.checker_status_ports = ports[HEALTHCHECKERS:2 * HEALTHCHECKERS]
        self.checker_metrics_ports = ports[2 * HEALTHCHECKERS:3 * HEALTHCHECKERS]
        broker_ports = ports[3 * HEALTHCHECKERS:3 * HEALTHCHECKERS + broker_count]
        self.broker_metrics_ports = ports[3 * HEALTHCHECKERS + broker_count:-3]
        self.broker_nodes = plan_brokers(broker_ports, layout)
        self.status_port = status_port or ports[-3]
        self.spark_ui_port = ports[-2]
        self.service_metrics_port = ports[-1]
        self.secret_file = layout.run_dir / "secret"
        self.started: list[str] = []
        self.exit_statuses: dict[str, int] = {}  # of the processes this platform spawned
        self._reapers: list[threading.Thread] = []

    @property
    def brokers(self) -> str:
        """The bootstrap list: every broker, HOST:PORT,..."""
        return bootstrap_list(self.broker_nodes)

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
        self.exit_statuses.pop(name, None)
        reaper = threading.Thread(target=self._reap, args=(name, process), daemon=True,
                                  name=f"reap-{name}")
        reaper.start()
        self._reapers.append(reaper)
        self.started.append(name)
        return process.pid

    def _reap(self, name: str, process: subprocess.Popen) -> None:
        status = process.wait()
        self.exit_statuses[name] = status
        # The same rule as the process restarter: a zero exit marks the service done, so that
        # no health checker restarts a finished service.
        if status == 0 and self.registry.live_pid(name) is None:
            self.registry.mark_done(name)

    def exit_status(self, name: str) -> int | None:
        """The exit status of the process this platform started for `name`; None while it
        runs (a restart by a health checker is not this platform's child)."""
        return self.exit_statuses.get(name)

    def start_checkers(self) -> None:
        # First of all: the cluster secret every process reads from this file (0600), for the
        # election, the heartbeats and the frames between brokers; never on a command line.
        write_secret_file(self.secret_file)
        peers = ",".join(f"{i}@127.0.0.1:{port}"
                         for i, port in enumerate(self.checker_ports, start=1))
        for node_id, port in enumerate(self.checker_ports, start=1):
            name = checker_name(node_id)
            self.register(name, [
                "-m", "healthchecker", "--node-id", str(node_id), "--peers", peers,
                "--listen", f"127.0.0.1:{port}", "--secret-file", str(self.secret_file),
                "--status-listen", f"127.0.0.1:{self.checker_status_ports[node_id - 1]}",
                "--metrics-listen", f"127.0.0.1:{self.checker_metrics_ports[node_id - 1]}",
                "--backend", "process", "--registry", str(self.layout.registry_dir),
                "--checkpoint-dir", str(self.layout.run_dir / name)])
            pid = self.spawn(name)
            console.say(f"  started {name:<16} pid {pid:<7} election udp + heartbeats tcp "
                        f"127.0.0.1:{port}")

    def start_brokers(self) -> None:
        """Every broker at once (a broker waits for its peers to elect a leader)."""
        for node, metrics_port in zip(self.broker_nodes, self.broker_metrics_ports,
                                      strict=True):
            self.register(node.name, broker_argv(broker_spec(
                node, self.broker_nodes, self.heartbeat_targets, self.secret_file, metrics_port)))
            pid = self.spawn(node.name)
            console.say(f"  started {node.name:<16} pid {pid:<7} {node.address}, data in "
                        f"{node.data_dir}")

    def start_service(self) -> None:
        self.register(SERVICE_NAME, [
            "-m", "spark.service", "--brokers", self.brokers, "--master", self.master,
            "--heartbeat-targets", self.heartbeat_targets,
            "--secret-file", str(self.secret_file),
            "--ui-port", str(self.spark_ui_port),
            "--metrics-listen", f"127.0.0.1:{self.service_metrics_port}",
            "--state-dir", str(self.layout.run_dir / SERVICE_NAME),
            *self.service_argv_extra])
        pid = self.spawn(SERVICE_NAME)
        console.say(f"  started {SERVICE_NAME:<16} pid {pid:<7} Spark {self.master}, "
                    f"its UI on {self.spark_ui_url}, /metrics on 127.0.0.1:"
                    f"{self.service_metrics_port}")

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.status_port}/"

    @property
    def spark_ui_url(self) -> str:
        return f"http://127.0.0.1:{self.spark_ui_port}/"

    def start_status(self) -> None:
        """The live status page (services/status), supervised like the rest."""
        self.register(STATUS_NAME, [
            "-m", "services.status", "--brokers", self.brokers,
            "--broker-metrics", ",".join(f"127.0.0.1:{p}" for p in self.broker_metrics_ports),
            "--checkers", ",".join(f"127.0.0.1:{p}" for p in self.checker_status_ports),
            "--secret-file", str(self.secret_file),
            "--listen", f"127.0.0.1:{self.status_port}",
            "--link", f"Spark driver UI (query service)={self.spark_ui_url}",
            "--name", STATUS_NAME, "--heartbeat-targets", self.heartbeat_targets])
        pid = self.spawn(STATUS_NAME)
        console.say(f"  started {STATUS_NAME:<16} pid {pid:<7} the live status page: "
                    f"{self.status_url}")

    def scrape_targets(self) -> list[tuple[str, str, int]]:
        """(job, name, /metrics port) of every process that serves /metrics
        (launcher/prometheus_targets.py): the checkers, the brokers, the query service."""
        checkers = [(CHECKER_JOB, checker_name(node_id), port)
                    for node_id, port in enumerate(self.checker_metrics_ports, start=1)]
        brokers = [(BROKER_JOB, node.name, port)
                   for node, port in zip(self.broker_nodes, self.broker_metrics_ports,
                                         strict=True)]
        return [*checkers, *brokers, (SERVICE_JOB, SERVICE_NAME, self.service_metrics_port)]

    # -- readiness -------------------------------------------------------------------------

    def wait_for_brokers(self) -> None:
        """Until every broker listens and the cluster has a leader (scripts/launcher/brokers.py)."""
        listening_s = wait_until_listening(self.broker_nodes, self.layout.log_path,
                                           self.exit_status)
        leader_s = wait_for_leader(self.broker_nodes)
        count = len(self.broker_nodes)
        console.say(f"  {count} broker(s) listening after {listening_s:.1f} s, a leader "
                    f"elected {leader_s:.1f} s later (bootstrap {self.brokers})")

    def wait_for_service(self, timeout_s: float = SERVICE_READY_TIMEOUT_S) -> float:
        """Seconds until the query service logged that it is up; RunLocalError after
        `timeout_s` (a service killed meanwhile is restarted by the health checkers)."""
        started = time.monotonic()
        log_path = self.layout.log_path(SERVICE_NAME)
        while time.monotonic() - started < timeout_s:
            if log_path.exists() and SERVICE_READY_LINE in log_path.read_text(errors="replace"):
                return time.monotonic() - started
            time.sleep(POLL_S)
        raise RunLocalError(f"query service not ready in {timeout_s:g} s; see {log_path}")

    # -- stopping --------------------------------------------------------------------------

    def stop_all(self, stop_timeout_s: float) -> None:
        """Checkers first (so none restarts the rest), then clients, the query service, and the
        brokers last, all together (the others talk to them while they stop): SIGTERM, wait,
        SIGKILL what is left (with its process group)."""
        for group in stop_order(self.registry.names()):
            self._stop_group(group, stop_timeout_s)
        for reaper in self._reapers:
            reaper.join(timeout=REAPER_JOIN_S)

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
            time.sleep(STOP_POLL_S)
        for name, (pid, _ticks) in running.items():
            console.say(f"  {name} (pid {pid}) ignored SIGTERM for {stop_timeout_s:g} s: SIGKILL")
            kill_process_tree(pid)


def start_platform(platform: LocalPlatform) -> None:
    """Everything but the clients, in the order each needs the one before: the checkers (so
    that whatever dies next is restarted), the brokers until they listen and elect, the query
    service, the status page. Returns before the query service is ready (wait_for_service)."""
    console.say(f"starting the platform on 127.0.0.1 (logs in {platform.layout.logs_dir})")
    platform.start_checkers()
    platform.start_brokers()
    platform.wait_for_brokers()
    platform.start_service()
    platform.start_status()


def stop_order(names: list[str]) -> list[list[str]]:
    """The groups stopped one after the other: checkers, clients (everything else), the query
    service, the brokers. Empty groups are left out."""
    checkers = [n for n in names if n.startswith(CHECKER_PREFIX)]
    broker_names = [n for n in names if n.startswith(BROKER_PREFIX)]
    service = [n for n in names if n == SERVICE_NAME]
    clients = [n for n in names if n not in {*checkers, *broker_names, *service}]
    return [group for group in (checkers, clients, service, broker_names) if group]


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it ended between the liveness check and the signal
