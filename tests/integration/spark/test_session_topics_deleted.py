"""Bounded disk: a finished session's topics leave every broker once the client acknowledged
its results. Real processes: a three-broker replicated cluster, the query service (Spark
local[2]) and a client session (`python -m client`).

- The default (retention 0): the results are exact, then `airports.<cid>`, `flights.<cid>` and
  `results.<cid>` are gone from the data directory of every replica (no trash left behind),
  the disk the brokers use outside their replication journal is back at its baseline but for
  the shared topics `__offsets` and `sessions` (the session's own commits and records, within
  one reservation step of a segment: a broker that became leader during the session reserves
  `reserve_ahead_bytes` ahead -- seen once at load 13-16, 4 KiB -> 1 MiB + 4 KiB on
  `__offsets`), the service counts three topics deleted, and both of its cursors (in its state
  directory) are at the end of `sessions`.
- The fault case: a retention of a few seconds, the service SIGKILLed once it read the ack
  (the topics are still there), restarted: it reads the ack again and deletes the topics; the
  session is not redone against its deleted input (no failed or given-up attempt) and nothing
  makes a topic of the session again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.flights.session_records import SESSIONS_TOPIC, SessionStarted, encode, session_topics
from common.kaska import Admin, Consumer, Producer
from common.kaska.topic_name import OFFSETS_TOPIC
from scripts.launcher.ports import free_ports
from services.broker.replication.placement import group_directory
from services.broker.storage.config import LogConfig
from services.broker.storage.log import DELETED_DIR, STAGING_DIR
from spark.service.progress_store import PROGRESS_STORE_NAME, FileProgressStore
from spark.service.query_service import CLEANUP_STORE_NAME
from tests.integration.metrics_scrape import scrape
from tests.integration.replication.cluster import BrokerCluster
from tests.integration.run_local_helpers import assert_results_match_reference, generated
from tests.integration.spark.service_process import ServiceProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
ROWS = 5_000
CLIENT_TIMEOUT_S = 300.0
SERVICE_UP_S = 240.0
# Deletion waits for any job of the session still running: a service restarted before it
# committed its cursor past SessionEnded redoes the job first (a cold JVM's job took over 60 s at
# load 14, beside other suites). A deadline, not a sleep: a quiet machine is done in seconds.
DELETION_WAIT_S = 240.0
FAULT_RETENTION_S = 8.0  # long enough to kill the service before it deletes
JOURNAL_DIR = "@replication"
SHARED_TOPICS = (OFFSETS_TOPIC, SESSIONS_TOPIC)
# What one append may reserve beyond the bytes it writes (a block, plus the step ahead).
RESERVATION_STEP_BYTES = LogConfig().reserve_ahead_bytes + 4096


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # The default deployment's replication groups (one per broker): a session's partitions
    # live in every group's directory, and every group must let go of them.
    with BrokerCluster(tmp_path_factory.mktemp("cluster"), size=3, groups=3) as made:
        made.start()
        yield made


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return generated(tmp_path_factory.mktemp("data"), rows=ROWS, seed=12)


@pytest.fixture
def services(tmp_path, cluster):
    started: list[ServiceProcess] = []

    def start(*extra_args: str) -> ServiceProcess:
        service = ServiceProcess(cluster.bootstrap, tmp_path / "service.log",
                                 *extra_args).start()
        started.append(service)
        wait_until(lambda: service.log_lines("following sessions/0"), "the service following "
                   "sessions", service, SERVICE_UP_S)
        return service

    yield start
    for service in started:
        service.kill9()


def wait_until(condition, what: str, service: ServiceProcess, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert service.alive(), f"the service died waiting for {what}:\n{service.log_tail()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{service.log_tail()}"
        time.sleep(0.2)


def run_client(cluster: BrokerCluster, data, results_dir: Path) -> str:
    command = [sys.executable, "-m", "client", "--flights", str(data.flights_path),
               "--airports", str(data.airports_path), "--brokers", cluster.bootstrap,
               "--results-dir", str(results_dir), "--partitions", "3",
               "--results-timeout-s", str(CLIENT_TIMEOUT_S)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S + 30, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    return re.search(r"client ([0-9a-f-]{36}):", done.stdout).group(1)


def session_dirs(cluster: BrokerCluster, client_id: str) -> dict[int, list[str]]:
    """Per broker: every entry of its data directory and of every replication group's
    directory in it (trash included) of this session."""
    found = {}
    for node_id, broker in cluster.brokers.items():
        entries = []
        for group in range(cluster.groups):
            directory = group_directory(broker.data_dir, group)
            if not directory.is_dir():
                continue
            entries += [path for path in directory.iterdir() if client_id in path.name]
            for trash in (directory / DELETED_DIR, directory / STAGING_DIR):
                entries += list(trash.iterdir()) if trash.is_dir() else []
        found[node_id] = sorted(str(path) for path in entries)
    return found


def allocated_bytes(data_dir: Path) -> dict[str, int]:
    """Disk bytes (blocks) of every file of the data directory, outside each replication
    group's journal (which keeps one small entry per batch until it is compacted)."""
    usage = {}
    for root, dirs, files in os.walk(data_dir):
        if JOURNAL_DIR in dirs:
            dirs.remove(JOURNAL_DIR)
        for name in files:
            path = Path(root) / name
            usage[str(path.relative_to(data_dir))] = os.stat(path).st_blocks * 512
    return usage


def broker_usage(cluster: BrokerCluster) -> dict[int, dict[str, int]]:
    return {i: allocated_bytes(broker.data_dir) for i, broker in cluster.brokers.items()}


def usage_changes(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]]):
    """Per broker: {file: (bytes before, bytes after)} of every file whose usage changed."""
    return {i: {path: (before[i].get(path), after[i].get(path))
                for path in sorted(before[i].keys() | after[i].keys())
                if before[i].get(path) != after[i].get(path)}
            for i in before}


def assert_only_shared_topics_grew(changes: dict[int, dict[str, tuple]]) -> None:
    """Every file whose disk use changed belongs to a topic shared by all sessions, and grew
    by at most one reservation step (see the module docstring)."""
    for broker, changed in changes.items():
        for path, (before, after) in changed.items():
            assert path.split(os.sep)[0] in SHARED_TOPICS, \
                f"broker {broker}: {path} changed {before} -> {after} bytes: {changed}"
            assert (after or 0) - (before or 0) <= RESERVATION_STEP_BYTES, \
                f"broker {broker}: {path} grew {before} -> {after} bytes: {changed}"


def cursor_at_end(cluster: BrokerCluster, service: ServiceProcess, store_name: str) -> bool:
    """The service's cursor `store_name` on `sessions` (kept in its state directory, beside the
    fold state) is at the end of `sessions`."""
    state_dir = service.log_path.with_name(service.log_path.name + ".state")
    with Consumer(cluster.bootstrap, group="t") as consumer:
        end = consumer.end_offset(SESSIONS_TOPIC, 0)
    return FileProgressStore(state_dir, store_name).load(0) == end


def live_session_topics(cluster: BrokerCluster, client_id: str) -> set[str]:
    with Admin(cluster.bootstrap) as admin:
        return set(admin.topics()) & set(session_topics(client_id))


def test_an_acknowledged_session_leaves_no_bytes_on_any_broker(cluster, data, services,
                                                                tmp_path):
    (metrics_port,) = free_ports(1)
    service = services("--metrics-listen", f"127.0.0.1:{metrics_port}")
    # The baseline: the cluster before the session, its shared topics `sessions` and
    # `__offsets` already written to (each gets its first disk reservation then).
    with Producer(cluster.bootstrap) as producer:
        producer.send_msg(SESSIONS_TOPIC, encode(SessionStarted("baseline", 1)))
    with Consumer(cluster.bootstrap, group="baseline") as consumer:
        consumer.commit(SESSIONS_TOPIC, 0, 0)
    baseline = broker_usage(cluster)

    client_id = run_client(cluster, data, tmp_path / "results")
    assert_results_match_reference(tmp_path / "results", data.flights_path, data.airports_path)

    wait_until(lambda: not any(session_dirs(cluster, client_id).values()),
               "session directories gone from every broker", service, DELETION_WAIT_S)
    assert live_session_topics(cluster, client_id) == set()
    assert_only_shared_topics_grew(usage_changes(baseline, broker_usage(cluster)))
    for store in (CLEANUP_STORE_NAME, PROGRESS_STORE_NAME):
        wait_until(lambda s=store: cursor_at_end(cluster, service, s),
                   f"{store} at the end of sessions", service, DELETION_WAIT_S)
    _, samples = scrape(metrics_port)
    assert samples[("query_service_session_topics_deleted_total", ())] == 3
    assert samples[("query_service_sessions_cleaned_total", ())] == 1
    assert samples[("query_service_sessions_acked_total", ())] == 1
    assert service.log_lines(f"session {client_id}: acknowledged, 3 topic(s) deleted")


def test_a_service_killed_after_the_ack_deletes_the_topics_after_its_restart(cluster, data,
                                                                              services,
                                                                              tmp_path):
    retention = ("--finished-session-retention-s", str(FAULT_RETENTION_S))
    service = services(*retention)
    client_id = run_client(cluster, data, tmp_path / "results")
    assert_results_match_reference(tmp_path / "results", data.flights_path, data.airports_path)
    wait_until(lambda: service.log_lines(f"session {client_id}: results acknowledged"),
               "the ack read by the service", service, DELETION_WAIT_S)
    service.kill9()
    assert live_session_topics(cluster, client_id) == set(session_topics(client_id))
    assert all(session_dirs(cluster, client_id).values())  # on every broker still
    killed_log_lines = len(service.log_path.read_text().splitlines())

    restarted = services(*retention)
    wait_until(lambda: not any(session_dirs(cluster, client_id).values()),
               "session directories gone from every broker after the restart", restarted,
               DELETION_WAIT_S)
    after_restart = restarted.log_path.read_text().splitlines()[killed_log_lines:]
    assert any(f"session {client_id}: results acknowledged" in line for line in after_restart)
    assert not [line for line in after_restart
                if re.search(r"attempt \d+ of \d+ failed|given up|Traceback", line)]
    # A redone job must not make results.<cid> again. Absence cannot be waited on; this can:
    # the restarted service has read (in order) and committed every record of `sessions`, the
    # session's SessionEnded among them, and every job it picked up for the session again (a
    # kill before the job's cursor was committed makes it re-read its SessionEnded) has ended.
    def settled() -> bool:
        lines = restarted.log_path.read_text().splitlines()[killed_log_lines:]
        picked = sum(f"session {client_id} picked up" in line for line in lines)
        ended = sum(bool(re.search(rf"session {client_id}( done in|: a job for it is already"
                                   rf" running|: interrupted|: given up)", line))
                    for line in lines)
        return ended >= picked and cursor_at_end(cluster, restarted, CLEANUP_STORE_NAME) and \
            cursor_at_end(cluster, restarted, PROGRESS_STORE_NAME)

    wait_until(settled, "both cursors at the end of sessions, every job for the session ended",
               restarted, DELETION_WAIT_S)
    assert live_session_topics(cluster, client_id) == set()
    assert not any(session_dirs(cluster, client_id).values())
    assert (tmp_path / "results" / "q1.csv").is_file()
    # The ack was committed before the kill, so the restart found it ahead of its job cursor:
    # the session's SessionEnded, if read again, starts no job (spark/service/acks_ahead.py).
    after_restart = restarted.log_path.read_text().splitlines()[killed_log_lines:]
    assert not [line for line in after_restart if f"session {client_id} picked up" in line]
