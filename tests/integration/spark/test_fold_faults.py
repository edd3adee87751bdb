"""The streaming fold under faults, end to end against a real broker: a query service SIGKILLed
while it folds a session and while it finishes one, its Python workers (the executors' side of
a local Spark) killed mid-batch, and a real client held back by its upload window then
SIGKILLed and resumed. Every time the results equal the plain-Python reference with every
result slice and QueryDone stored once; a restarted service resumes from its checkpoint and
reads again at most what its unfinished micro-batch covered."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from common.flights.session_records import QUERIES, ResultRows, flights_topic, results_topic
from common.kaska import Consumer
from oracle import reference
from oracle.result_compare import assert_same_results
from scripts.bench.queries import produce_session
from scripts.datagen.generate import generate
from tests.integration.broker.broker_process import CLIENT_OPTIONS, BrokerProcess
from tests.integration.spark.service_process import ServiceProcess, topic_records
from tests.integration.spark.test_query_service import check_results, done_queries, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 30_000
SLICE_ROWS = 1_000  # 30 records: many micro-batches at one record per trigger
REPO_ROOT = Path(__file__).resolve().parents[3]
# One record per micro-batch, half a second apart: a session takes many batches to fold.
SLOW_FOLD = ("--max-offsets-per-trigger", "1", "--trigger-interval-s", "0.5")
FOLDED_LINE = re.compile(r"micro-batch (\d+): \d+ partials of (\d+) rows")
RECOVERED_LINE = re.compile(r"fold state recovered as of micro-batch (-?\d+)")


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "broker").start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    report = generate(tmp_path_factory.mktemp("data"), ROWS, seed=31, invalid_rate=0.02)
    expected = reference.compute_files(report.flights_path, report.airports_path)
    assert all(expected.by_query().values())
    return report, expected


def folded_rows(service: ServiceProcess) -> list[int]:
    """Rows of each micro-batch the service logged as folded, in order."""
    return [int(match.group(2)) for line in service.log_lines("partials of")
            if (match := FOLDED_LINE.search(line))]


def recovered_at(service: ServiceProcess) -> list[int]:
    return [int(match.group(1)) for line in service.log_lines("fold state recovered")
            if (match := RECOVERED_LINE.search(line))]


def session_done(broker, client_id) -> bool:
    return len(done_queries(topic_records(broker.address, results_topic(client_id)))) \
        >= len(QUERIES)


def test_killed_mid_stream_resumes_from_its_checkpoint_and_stays_exact(tmp_path, broker, data,
                                                                     services):
    report, expected = data
    service = services(*SLOW_FOLD)
    session = produce_session(broker.address, report.flights_path, report.airports_path,
                              slice_rows=SLICE_ROWS, **CLIENT_OPTIONS)
    wait_until(lambda: len([r for r in folded_rows(service) if r]) >= 3,
               "three folded micro-batches", service)
    service.kill9()
    folded_before = sum(folded_rows(service))
    assert 0 < folded_before < ROWS, "the kill landed mid-stream"
    assert not done_queries(topic_records(broker.address, results_topic(session.client_id)))

    log_before = len(service.log_path.read_text(errors="replace"))
    restarted = services()
    wait_until(lambda: session_done(broker, session.client_id), "the session's results",
               restarted)
    check_results(topic_records(broker.address, results_topic(session.client_id)), expected)
    after = restarted.log_path.read_text(errors="replace")[log_before:]
    (committed,) = [int(m.group(1)) for m in RECOVERED_LINE.finditer(after)][:1]
    assert committed >= 1, "the restart recovered from committed micro-batches"
    reread = sum(int(m.group(2)) for m in FOLDED_LINE.finditer(after))
    # Only what the killed service had not committed is read again: at most its last
    # (uncommitted) micro-batch beyond what was left.
    assert reread <= ROWS - folded_before + SLICE_ROWS, (reread, folded_before)


def test_killed_mid_finish_writes_each_result_once(tmp_path, broker, data, services):
    report, expected = data
    # Slow result writes: the finish (Q3's and Q4's slices after Q1's and Q2's QueryDone)
    # takes seconds, long enough to be killed in the middle.
    slow_writes = ("--result-rows-per-slice", "20", "--result-slice-pause-s", "0.3")
    service = services(*slow_writes)
    session = produce_session(broker.address, report.flights_path, report.airports_path,
                              slice_rows=SLICE_ROWS, **CLIENT_OPTIONS)
    topic = results_topic(session.client_id)
    wait_until(lambda: len(done_queries(topic_records(broker.address, topic))) >= 1,
               "the finish's first QueryDone", service, timeout_s=600.0)
    service.kill9()
    at_kill = done_queries(topic_records(broker.address, topic))
    assert len(at_kill) < len(QUERIES), f"the finish had ended: {at_kill}"

    restarted = services("--result-rows-per-slice", "20")
    wait_until(lambda: session_done(broker, session.client_id), "the session's results",
               restarted)
    check_results(topic_records(broker.address, topic), expected)


def test_python_workers_killed_mid_batch_cost_a_redone_batch_not_a_row(tmp_path, broker, data,
                                                                       services):
    report, expected = data
    # Each range's task takes a second: a kill lands in the middle of one.
    service = services(*SLOW_FOLD, "--fold-range-pause-s", "1.0")
    session = produce_session(broker.address, report.flights_path, report.airports_path,
                              slice_rows=SLICE_ROWS, **CLIENT_OPTIONS)
    wait_until(lambda: any(folded_rows(service)), "a first folded micro-batch", service)
    killed = 0
    deadline = time.monotonic() + 120
    while not service.log_lines("the fold query failed") and time.monotonic() < deadline:
        killed += _kill_python_workers(service.proc.pid)
        time.sleep(0.05)
    assert killed and service.log_lines("the fold query failed"), \
        "no micro-batch failed: the workers were never killed mid-task"
    wait_until(lambda: session_done(broker, session.client_id), "the session's results",
               service)
    check_results(topic_records(broker.address, results_topic(session.client_id)), expected)
    assert len(recovered_at(service)) >= 2, "the fold query was restarted from its state"


def _kill_python_workers(service_pid: int) -> int:
    """SIGKILL every `pyspark.daemon` process (the daemon and the workers it forked: Spark's
    executor side in local mode) of the service's session; how many. By session, not by
    parent: a worker whose daemon was killed first lives on, reparented, and is still used."""
    listed = subprocess.run(["pgrep", "-f", "pyspark.daemon"], capture_output=True, text=True,
                            check=False).stdout.split()
    killed = 0
    for pid in map(int, listed):
        try:
            if os.getsid(pid) != service_pid:
                continue
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass  # gone meanwhile
    return killed


def test_a_client_held_back_then_killed_resumes_and_gets_exact_results(tmp_path, broker, data,
                                                                     services):
    report, expected = data
    services(*SLOW_FOLD)
    client_id = str(uuid.uuid4())
    results = tmp_path / "results"
    # A window of two records per partition: the client is held back as soon as it runs two
    # records ahead of the fold.
    command = [sys.executable, "-m", "client", "--flights", str(report.flights_path),
               "--airports", str(report.airports_path), "--brokers", broker.address,
               "--results-dir", str(results), "--client-id", client_id, "--partitions", "4",
               "--batch-rows", str(SLICE_ROWS), "--upload-window-bytes", "1000000",
               "--results-timeout-s", "300"]
    first = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 120
    for line in first.stdout:
        lines.append(line)
        if "held back: backlog" in line or time.monotonic() > deadline:
            break
    assert any("held back: backlog" in line for line in lines), "".join(lines[-20:])
    sent_while_held = _flights_end(broker, client_id)
    first.kill()
    first.wait(30)
    assert sum(sent_while_held) < ROWS // SLICE_ROWS, "killed before the upload ended"

    second = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=600, check=False)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed"]
    assert summary["upload_window"]["held_back_s"] > 0, "the resumed client was held back too"
    for query, rows in expected.by_query().items():
        with open(results / f"{query}.csv", newline="") as file:
            found = list(csv.reader(file))[1:]
        assert_same_results(query, found, rows)


def _flights_end(broker, client_id) -> list[int]:
    with Consumer(broker.address, group="t", **CLIENT_OPTIONS) as consumer:
        return [consumer.end_offset(flights_topic(client_id), p) for p in range(4)]


def test_fold_writes_every_slice_and_done_once(tmp_path, broker, data, services):
    """No fault: the streamed Q1 and Q2 slices and the finish's records, each once."""
    report, expected = data
    service = services()
    session = produce_session(broker.address, report.flights_path, report.airports_path,
                              slice_rows=SLICE_ROWS, **CLIENT_OPTIONS)
    wait_until(lambda: session_done(broker, session.client_id), "the session's results",
               service)
    records = topic_records(broker.address, results_topic(session.client_id))
    check_results(records, expected)
    assert any(isinstance(r, ResultRows) and r.query == "q2" for r in records)
    assert sum(folded_rows(service)) == ROWS
