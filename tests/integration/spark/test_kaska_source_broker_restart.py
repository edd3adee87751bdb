"""A broker SIGKILLed and restarted in the middle of a read: the `kaska` source still returns
exactly the requested rows (or its task fails; it never returns a short or doubled range)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from common.kaska.errors import KaskaError
from common.kaska.range_reader import RangeReader
from spark.source.kaska_source import SOURCE_NAME, offsets_json
from tests.integration.broker.broker_process import BrokerProcess
from tests.integration.spark.kaska_rows import COLUMNS, RowsProducer

pytestmark = pytest.mark.integration

STAGE_WAIT_S = 120.0
# One fetch per batch (fetchBytesMax 64): reading them takes seconds, more than a restart.
BATCHES_PER_PARTITION = 1500


@pytest.fixture
def restartable_broker(tmp_path):
    process = BrokerProcess(tmp_path / "data").start()
    yield process
    process.kill()


def kill(broker: BrokerProcess) -> None:
    broker.proc.kill()  # SIGKILL
    broker.proc.wait(10)
    broker.proc.stdout.close()


def kill_and_restart(broker: BrokerProcess) -> None:
    kill(broker)
    broker.start()  # same port, same data directory


def test_range_reader_continues_exactly_across_a_broker_sigkill(restartable_broker):
    producer = RowsProducer(restartable_broker.address, "flights.restart-iter", partitions=1)
    producer.produce(60)
    producer.close()
    # Tiny fetches: one batch each, so the read is many requests long.
    reader = RangeReader(restartable_broker.address, fetch_bytes_max=64, retry_deadline_s=30.0)
    with reader:
        records = reader.read(producer.topic, 0, 5, 55)
        first = [next(records) for _ in range(20)]
        kill(restartable_broker)
        restarter = threading.Thread(target=restartable_broker.start)
        restarter.start()  # the reader meets a dead broker, then one coming up
        rest = list(records)
        restarter.join()
    assert [r.offset for r in first + rest] == list(range(5, 55))
    assert [r.header.sequence for r in first + rest] == list(range(5, 55))


def test_range_reader_fails_rather_than_return_a_short_range(restartable_broker):
    producer = RowsProducer(restartable_broker.address, "flights.restart-dead", partitions=1)
    producer.produce(10)
    producer.close()
    reader = RangeReader(restartable_broker.address, fetch_bytes_max=64, retry_deadline_s=1.0,
                         connect_timeout_s=0.5)
    with reader:
        records = reader.read(producer.topic, 0, 0, 10)
        got = [next(records).offset for _ in range(3)]
        restartable_broker.kill()
        with pytest.raises(KaskaError) as failure:
            got += [record.offset for record in records]
    assert failure.value.retriable and got == [0, 1, 2]


def test_spark_read_returns_exact_rows_across_a_broker_sigkill(spark, restartable_broker):
    producer = RowsProducer(restartable_broker.address, "flights.restart-spark", partitions=2)
    producer.produce(BATCHES_PER_PARTITION)
    producer.close()
    ends = [BATCHES_PER_PARTITION] * 2
    frame = (spark.read.format(SOURCE_NAME).option("brokers", restartable_broker.address)
             .option("topic", producer.topic)
             .option("startingOffsets", offsets_json(producer.topic, [0, 0]))
             .option("endingOffsets", offsets_json(producer.topic, ends))
             .option("columns", json.dumps(COLUMNS)).option("fetchBytesMax", "64")
             .option("retryDeadlineS", "60").load())
    outcome: dict = {}

    def collect() -> None:
        outcome["rows"] = [tuple(row) for row in frame.collect()]
        outcome["finished"] = time.monotonic()

    reading = threading.Thread(target=collect)
    reading.start()
    wait_for_a_running_stage(spark, reading)
    kill_and_restart(restartable_broker)
    back_at = time.monotonic()
    reading.join(STAGE_WAIT_S)
    assert not reading.is_alive(), "the read never finished"
    # Still running when the broker was back: the read spanned the whole outage.
    assert outcome["finished"] > back_at, "the read ended before the broker came back"
    assert sorted(outcome["rows"], key=repr) == sorted(producer.expected, key=repr)
    assert len(outcome["rows"]) == 2 * BATCHES_PER_PARTITION * 3


def wait_for_a_running_stage(spark, reading: threading.Thread) -> None:
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + STAGE_WAIT_S
    while not tracker.getActiveStageIds():
        assert reading.is_alive(), "the read ended before any stage ran"
        assert time.monotonic() < deadline, "no stage started"
        time.sleep(0.02)
