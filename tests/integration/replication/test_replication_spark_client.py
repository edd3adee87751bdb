"""The two readers and writers of the pipeline over a three-broker cluster whose leader is
SIGKILLed under them (real broker processes, default election settings):

- the `kaska` Spark source reading exact offset ranges: the leader dies in the middle of the
  read (and is restarted afterwards); the DataFrame holds exactly the requested rows, none lost,
  none twice (the single-broker version: tests/integration/spark/
  test_kaska_source_broker_restart.py);
- a real client session (`python -m client`) answered by the fake query service of
  tests/integration/client: the leader dies while the flights file uploads; the upload goes on
  on the two others while it is down, the session completes, every batch is stored exactly once
  where its message id puts it, the results equal the reference of docs/queries.md, and once
  every broker has stopped, all three hold the same bytes of the session's data.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from client.message_ids import Placement, message_id
from client.resume import SessionCheckpoint
from common.flights.result_csv import csv_text
from common.flights.session_records import (
    SESSIONS_TOPIC,
    SessionEnded,
    SessionStarted,
    airports_topic,
    decode,
    flights_topic,
)
from common.kaska import Consumer
from oracle.reference import compute_files
from oracle.result_compare import assert_same_results
from scripts.datagen.generate import generate
from spark.source.kaska_source import SOURCE_NAME, offsets_json
from tests.integration.client.fake_query_service import FakeQueryService, read_data_topic
from tests.integration.replication.workload import check_replicas_identical
from tests.integration.spark.kaska_rows import COLUMNS, RowsProducer
from tests.spark_session import local_spark_session

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
# Spark's Python workers (started by the JVM) need the tree on their path.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

# --- the Spark source -------------------------------------------------------------------------
STAGE_WAIT_S = 120.0
# One fetch per batch (fetchBytesMax 64): reading 2 x 1000 batches takes seconds, longer than
# a failover (an election within 1-2 s of silence).
BATCHES_PER_PARTITION = 1000
ROWS_PER_RECORD = 3

# --- the client session -----------------------------------------------------------------------
ROWS = 20_000
BATCH_ROWS = 25  # ~800 flights messages: an upload of several seconds
PARTITIONS = 3
KILL_AFTER_MESSAGES = 100  # flights messages acknowledged before the leader is killed
MESSAGES_WHILE_DOWN = 100  # acknowledged after the kill, before the old leader comes back
CLIENT_TIMEOUT_S = 150.0
PROGRESS_TIMEOUT_S = 60.0
SETTLE_S = 3.0  # the restarted broker fetches what it missed before every broker stops


@pytest.fixture(scope="module")
def spark():
    """The run's local SparkSession with the `kaska` source (stopped here only when this module
    created it: the Spark tests' session fixture may share it)."""
    from pyspark.sql import SparkSession

    from spark.source.kaska_source import register

    existing = SparkSession.getActiveSession()
    session = local_spark_session("flights-optimizer-replication-tests")
    register(session)
    yield session
    if existing is None:
        session.stop()


# --- (a) the kaska source through a leader SIGKILL ------------------------------------------

def test_spark_read_returns_exact_rows_across_a_leader_sigkill(spark, make_cluster):
    cluster = make_cluster()
    producer = RowsProducer(cluster.bootstrap, "flights.replicated-spark", partitions=2,
                            rows_per_record=ROWS_PER_RECORD)
    producer.produce(BATCHES_PER_PARTITION)
    producer.close()
    ends = [BATCHES_PER_PARTITION] * 2
    frame = (spark.read.format(SOURCE_NAME).option("brokers", cluster.bootstrap)
             .option("topic", producer.topic)
             .option("startingOffsets", offsets_json(producer.topic, [0, 0]))
             .option("endingOffsets", offsets_json(producer.topic, ends))
             .option("columns", json.dumps(COLUMNS)).option("fetchBytesMax", "64")
             .option("retryDeadlineS", "60").load())
    leader = cluster.leader_id()
    outcome: dict = {}

    def collect() -> None:
        try:
            outcome["rows"] = [tuple(row) for row in frame.collect()]
        finally:
            outcome["finished"] = time.monotonic()

    reading = threading.Thread(target=collect, name="spark-collect")
    reading.start()
    wait_for_a_running_stage(spark, reading)
    killed_at = time.monotonic()
    cluster.kill(leader)  # SIGKILL, waits for the process to end
    successor = cluster.leader(among=cluster.others(leader))
    assert successor.leader_id != leader
    cluster.start_broker(leader)  # same port and data directory: it rejoins as a follower
    reading.join(STAGE_WAIT_S)
    assert not reading.is_alive(), "the read never finished"
    assert "rows" in outcome, "the read failed (see the Spark error above)"
    assert outcome["finished"] > killed_at, "the read ended before the leader was killed"
    rows = outcome["rows"]
    assert len(rows) == 2 * BATCHES_PER_PARTITION * ROWS_PER_RECORD
    assert not [row for row, n in Counter(rows).items() if n > 1], "rows read twice"
    assert sorted(rows, key=repr) == sorted(producer.expected, key=repr)
    assert not cluster.safety_lines(), cluster.safety_lines()
    print(f"leader {leader} killed {killed_at - outcome['finished']:+.1f} s before the read "
          f"ended; successor {successor.leader_id} (epoch {successor.epoch})")


def wait_for_a_running_stage(spark, reading: threading.Thread) -> None:
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + STAGE_WAIT_S
    while not tracker.getActiveStageIds():
        assert reading.is_alive(), "the read ended before any stage ran"
        assert time.monotonic() < deadline, "no stage started"
        time.sleep(0.02)


# --- (b) a client session through a leader SIGKILL ------------------------------------------

@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """(generator report, reference results of its flights file)."""
    root = tmp_path_factory.mktemp("sample")
    report = generate(root, rows=ROWS, seed=23, invalid_rate=0.02)
    return report, compute_files(report.flights_path, report.airports_path)


def client_command(report, bootstrap: str, results_dir: Path, client_id: str) -> list[str]:
    return [sys.executable, "-m", "client", "--flights", str(report.flights_path),
            "--airports", str(report.airports_path), "--brokers", bootstrap,
            "--results-dir", str(results_dir), "--client-id", client_id,
            "--partitions", str(PARTITIONS), "--batch-rows", str(BATCH_ROWS),
            "--checkpoint-interval-s", "0.05", "--results-timeout-s", "90"]


def acked_messages(checkpoint: SessionCheckpoint, name: str) -> int:
    """The client's checkpointed count of acknowledged messages of `name` (0 before any)."""
    try:
        state = checkpoint.store.load_json()
    except Exception:  # noqa: BLE001 - a checkpoint caught mid-rename reads as "not yet"
        return 0
    return 0 if state is None else state["files"][name]["messages_acked"]


def wait_for_acked(checkpoint: SessionCheckpoint, client: subprocess.Popen, at_least: int
                   ) -> int:
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    while True:
        acked = acked_messages(checkpoint, "flights")
        if acked >= at_least:
            return acked
        assert client.poll() is None, f"the client exited {client.returncode} early"
        assert time.monotonic() < deadline, \
            f"{acked} flights messages acknowledged after {PROGRESS_TIMEOUT_S:.0f} s, " \
            f"waiting for {at_least}"
        time.sleep(0.01)


def read_session_records(bootstrap: str, client_id: str) -> list:
    """This client's SessionStarted / SessionEnded records on `sessions`, in order."""
    found = []
    with Consumer(bootstrap, group="t") as consumer:
        consumer.seek(SESSIONS_TOPIC, 0, 0)
        end = consumer.end_offset(SESSIONS_TOPIC, 0)
        while consumer.position(SESSIONS_TOPIC, 0) < end:
            message = consumer.poll(5.0)
            assert message is not None, f"{SESSIONS_TOPIC} ends before {end}"
            record = decode(message.value)
            if isinstance(record, SessionStarted | SessionEnded) and \
                    record.client_id == client_id:
                found.append(record)
    return found


def check_stored_once(bootstrap: str, topic: str, end_offsets: list[int], client_id: str,
                      rows_sent: int) -> int:
    """Every message of the file stored exactly once, under the partition and sequence its
    message id maps to, by this client's producer id; its row ids exactly 0..rows_sent-1.
    Returns the number of messages."""
    batches = read_data_topic(bootstrap, topic, end_offsets)
    assert len(batches) == math.ceil(rows_sent / BATCH_ROWS), \
        f"{topic}: {len(batches)} messages stored for {rows_sent} rows"
    ids = sorted(message_id(Placement(b.partition, b.sequence), PARTITIONS) for b in batches)
    assert ids == list(range(len(batches))), f"{topic}: message ids stored twice or missing"
    assert {b.producer_id for b in batches} == {uuid.UUID(client_id).bytes}
    row_ids = sorted(row["row_id"] for b in batches for row in b.rows)
    assert row_ids == list(range(rows_sent)), f"{topic}: row ids stored twice or missing"
    return len(batches)


def test_client_session_rides_out_a_leader_sigkill_mid_upload(make_cluster, sample, tmp_path):
    report, reference = sample
    total_messages = math.ceil((ROWS - report.invalid_rows["short_row"]) / BATCH_ROWS)
    cluster = make_cluster()
    leader = cluster.leader_id()
    client_id = str(uuid.uuid4())
    results_dir = tmp_path / "results"
    checkpoint = SessionCheckpoint(results_dir / "state", client_id)
    service = FakeQueryService(cluster.bootstrap, rows_per_slice=7).start()
    client_log = tmp_path / "client.log"
    client = None
    try:
        with open(client_log, "wb") as log:
            client = subprocess.Popen(client_command(report, cluster.bootstrap, results_dir,
                                                     client_id),
                                      cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        acked_at_kill = wait_for_acked(checkpoint, client, KILL_AFTER_MESSAGES)
        cluster.kill(leader)  # SIGKILL
        assert acked_at_kill <= total_messages - MESSAGES_WHILE_DOWN, "the kill came too late"
        killed_at = time.monotonic()
        # The upload goes on through the two others while the old leader is down.
        acked_while_down = wait_for_acked(checkpoint, client,
                                          acked_at_kill + MESSAGES_WHILE_DOWN)
        resumed_after_s = time.monotonic() - killed_at
        assert not cluster.brokers[leader].alive()
        successor = cluster.leader(among=cluster.others(leader))
        cluster.start_broker(leader)
        client.wait(CLIENT_TIMEOUT_S)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait(10)
        service.stop()
    output = client_log.read_text(errors="replace")
    assert client.returncode == 0, output[-4000:]

    summary = json.loads((results_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    rows_sent = summary["rows_sent"]
    assert rows_sent["flights"] == ROWS - report.invalid_rows["short_row"]
    records = read_session_records(cluster.bootstrap, client_id)
    assert Counter(type(r).__name__ for r in records) == {"SessionStarted": 1,
                                                          "SessionEnded": 1}
    ended = next(r for r in records if isinstance(r, SessionEnded))
    messages = {}
    for name, topic in (("flights", flights_topic(client_id)),
                        ("airports", airports_topic(client_id))):
        messages[name] = check_stored_once(cluster.bootstrap, topic, ended.end_offsets[topic],
                                           client_id, rows_sent[name])
    assert messages["flights"] == total_messages

    for query, expected in reference.by_query().items():
        text = (results_dir / f"{query}.csv").read_text()
        assert text == csv_text(query, service.answered[client_id][query])
        _header, *rows = csv.reader(text.splitlines())
        assert_same_results(query, rows, expected)

    # Every broker, the restarted one included, holds the same bytes of the session's data.
    time.sleep(SETTLE_S)
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), f"exit codes on SIGTERM: {codes}"
    compared = 0
    for topic in (flights_topic(client_id), airports_topic(client_id)):
        end_offsets = ended.end_offsets[topic]
        compared += check_replicas_identical(cluster, topic, list(range(len(end_offsets))),
                                             dict(enumerate(end_offsets)))
    assert compared > 0
    assert not cluster.safety_lines(), cluster.safety_lines()
    print(f"leader {leader} killed at {acked_at_kill}/{total_messages} flights messages; "
          f"{acked_while_down} acknowledged {resumed_after_s:.1f} s later with it down; "
          f"successor {successor.leader_id} (epoch {successor.epoch}); "
          f"{compared} bytes identical on all three brokers")
