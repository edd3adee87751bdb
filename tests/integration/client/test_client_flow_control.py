"""Flow control of the client's flights upload (client/upload_window.py) against a real broker.

- Nothing moves the log start (as with a query service that does not fold yet): a client with
  a window of one byte per partition sends one flights record per partition and is held back,
  says so on its progress lines; SIGTERM while held ends it promptly (exit 3, resumable, the
  wait counted in summary.json); the resumed client rebuilds its window from what it skipped
  and is held at once without sending more (bounded); SIGKILLed there and resumed without flow
  control, it completes with every row stored exactly once and SessionStarted carrying the
  airports' end offsets.
- The test moves the log start itself (Admin.delete_records, as the folding service will): a
  client is held back at its window and released as the log start moves, killed while held
  back and resumed: every row stored exactly once.
"""

import math
import subprocess
import threading
import time
import uuid

import pytest

from client.resume import SessionCheckpoint
from common.flights.session_records import (
    SESSIONS_TOPIC,
    SessionStarted,
    airports_topic,
    decode,
    flights_topic,
)
from common.kaska import Admin, Consumer
from oracle.reference import compute_files
from scripts.datagen.generate import generate
from tests.integration.broker.broker_process import BrokerProcess
from tests.integration.client.fake_query_service import FakeQueryService
from tests.integration.client.test_client_sessions import (
    PARTITIONS,
    REPO,
    check_results,
    check_stored_once,
    client_command,
    read_summary,
    run_client,
    session_records,
)

pytestmark = pytest.mark.integration

ROWS = 3_000
BATCH_ROWS = 50
WAIT_S = 60.0
HELD_LINE = "held back: backlog"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    report = generate(root, rows=ROWS, seed=23, invalid_rate=0.0)
    return (report.flights_path, report.airports_path, report,
            compute_files(report.flights_path, report.airports_path))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield process
    process.kill()


@pytest.fixture
def lone_broker(tmp_path):
    """A broker no fake query service follows: the folder deletes what such a service reads."""
    process = BrokerProcess(tmp_path / "broker").start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def service(broker):
    fake = FakeQueryService(broker.address, rows_per_slice=40, duplicates=False).start()
    yield fake
    fake.stop()


class Client:
    """A client process whose stdout lines are collected as they come."""

    def __init__(self, *args) -> None:
        self.proc = subprocess.Popen(client_command(*args), cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for_line(self, text: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, f"the client exited ({self.proc.returncode})"
            assert time.monotonic() < deadline, f"no {text!r} line: {self.lines[-5:]}"
            time.sleep(0.01)


def flights_end_offsets(broker, client_id) -> list[int]:
    with Consumer(broker.address, group="t") as consumer:
        return [consumer.end_offset(flights_topic(client_id), p) for p in range(PARTITIONS)]


def read_started(broker, client_id) -> SessionStarted:
    with Consumer(broker.address, group="t") as consumer:
        consumer.seek(SESSIONS_TOPIC, 0, 0)
        while True:
            record = decode(consumer.poll(5.0).value)
            if isinstance(record, SessionStarted) and record.client_id == client_id:
                return record


def check_started(broker, client_id, airports_rows) -> None:
    started = read_started(broker, client_id)
    with Consumer(broker.address, group="t") as consumer:
        ends = [consumer.end_offset(airports_topic(client_id), p) for p in range(PARTITIONS)]
    assert started.partitions == PARTITIONS
    assert started.airports_end_offsets == ends
    assert sum(ends) == math.ceil(airports_rows / BATCH_ROWS)


def airports_rows(data) -> int:
    return sum(1 for _ in data[1].open()) - 1


def test_held_back_without_folding_stops_promptly_resumes_bounded_and_completes(
        broker, service, data, tmp_path):
    client_id = str(uuid.uuid4())
    args = (broker, data, tmp_path / "r", client_id, "--batch-rows", str(BATCH_ROWS),
            "--checkpoint-interval-s", "0")
    tiny_window = ("--upload-window-bytes", str(PARTITIONS), "--window-poll-interval-s", "0.05")
    first = Client(*args, *tiny_window)
    first.wait_for_line(HELD_LINE)
    # Held back: one record per partition (its share is one byte), nothing more.
    assert flights_end_offsets(broker, client_id) == [1] * PARTITIONS
    stopped_at = time.monotonic()
    first.proc.terminate()
    assert first.proc.wait(10) == 3
    assert time.monotonic() - stopped_at < 5.0, "a held-back client stops promptly"
    summary = read_summary(tmp_path / "r")
    assert summary["status"] == "interrupted"
    window = summary["upload_window"]
    assert window["window_bytes"] == PARTITIONS and window["held_back_s"] > 0
    assert window["backlog_bytes_peak"] > 0 and window["log_start_polls"] > 0
    checkpoint = SessionCheckpoint(tmp_path / "r" / "state", client_id)
    assert checkpoint.store.load_json()["files"]["flights"]["messages_acked"] == PARTITIONS

    # Resumed with the same window: the skipped records above the log start still count, so
    # it is held at once, sending nothing more (bounded, not a second window's worth).
    second = Client(*args, *tiny_window)
    second.wait_for_line(HELD_LINE)
    assert flights_end_offsets(broker, client_id) == [1] * PARTITIONS
    second.proc.kill()
    second.proc.wait(10)

    # Resumed without flow control: completes, every row once, results exact.
    done = run_client(*args, "--upload-window-bytes", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = read_summary(tmp_path / "r")
    assert summary["status"] == "completed" and summary["upload_window"] == {"window_bytes": 0}
    assert summary["upload"]["flights"]["messages_skipped"] == PARTITIONS
    check_stored_once(broker, client_id, BATCH_ROWS, ROWS)
    assert session_records(broker, client_id) == {"SessionStarted": 1, "SessionEnded": 1}
    check_started(broker, client_id, airports_rows(data))
    check_results(tmp_path / "r", data, service, client_id)


class Folder:
    """Stands in for the folding query service: reads each flights partition as it grows and
    moves its log start past what it read (Admin.delete_records), keeping every row it read."""

    def __init__(self, broker, client_id) -> None:
        self.broker = broker
        self.topic = flights_topic(client_id)
        self.rows: list[int] = []
        self.moves = 0
        self.enabled = threading.Event()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from common.flights.arrow_rows import ROW_ID, decode_rows
        read_to = [0] * PARTITIONS
        with Consumer(self.broker.address, group="folder") as consumer, \
                Admin(self.broker.address) as admin:
            while not self.stop.wait(0.05):
                if not self.enabled.is_set():
                    continue
                for partition in range(PARTITIONS):
                    end = consumer.end_offset(self.topic, partition)
                    if end <= read_to[partition]:
                        continue
                    consumer.unsubscribe()
                    consumer.seek(self.topic, read_to[partition], partition)
                    while consumer.position(self.topic, partition) < end:
                        message = consumer.poll(5.0)
                        self.rows += decode_rows(message.value).column(ROW_ID).to_pylist()
                    read_to[partition] = end
                    admin.delete_records(self.topic, {partition: end})
                    self.moves += 1

    def close(self) -> None:
        self.stop.set()
        self._thread.join(10)


def test_held_back_at_the_window_released_as_the_log_start_moves_killed_and_resumed(
        lone_broker, data, tmp_path):
    """No fake query service here: the folder reads the flights and deletes them, and the
    client waits for results briefly (`--results-timeout-s 1`) and fails there."""
    broker = lone_broker
    client_id = str(uuid.uuid4())
    args = (broker, data, tmp_path / "r", client_id, "--batch-rows", str(BATCH_ROWS),
            "--checkpoint-interval-s", "0", "--upload-window-bytes", str(PARTITIONS),
            "--window-poll-interval-s", "0.05", "--results-timeout-s", "1")
    folder = Folder(broker, client_id)
    try:
        first = Client(*args)
        first.wait_for_line(HELD_LINE)
        assert flights_end_offsets(broker, client_id) == [1] * PARTITIONS
        folder.enabled.set()  # the service folds: the client is released, a record at a time
        deadline = time.monotonic() + WAIT_S
        while sum(flights_end_offsets(broker, client_id)) < 20:
            assert time.monotonic() < deadline, "not released as the log start moved"
            time.sleep(0.01)
        folder.enabled.clear()  # folding stops: held back again, then killed there
        first.lines.clear()
        first.wait_for_line(HELD_LINE)
        first.proc.kill()
        first.proc.wait(10)
        folder.enabled.set()
        resumed = subprocess.run(client_command(*args), cwd=REPO, capture_output=True,
                                 text=True, timeout=WAIT_S * 2, check=False)
        summary = read_summary(tmp_path / "r")
        assert summary["rows_sent"]["flights"] == ROWS, resumed.stderr[-3000:]
        assert summary["upload_window"]["held_back_s"] > 0
        deadline = time.monotonic() + WAIT_S
        while len(folder.rows) < ROWS:
            assert time.monotonic() < deadline, f"{len(folder.rows)} of {ROWS} rows folded"
            time.sleep(0.01)
    finally:
        folder.close()
    assert sorted(folder.rows) == list(range(ROWS))  # every row stored exactly once
    assert folder.moves > 20
