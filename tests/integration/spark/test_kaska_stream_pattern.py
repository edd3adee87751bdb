"""One `kaska` stream over every session topic (`subscribePattern`) against a real broker:
rate-limited micro-batches, a topic gate that admits a topic only once a marker file exists and
caps it at the offsets the marker names, a topic created while the query runs, and every row
exactly once across a query stop and a restart from its checkpoint; each topic's rows through
the transform with their own `{topic}` argument, and a topic deleted once read dropped."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from common.kaska import Admin
from spark.source.kaska_gate import TopicAdmission
from spark.source.kaska_source import SOURCE_NAME
from tests.integration.spark.kaska_rows import CLIENT_OPTIONS, COLUMNS, RowsProducer

pytestmark = pytest.mark.integration

RECORDS_PER_TRIGGER = 2
ROWS_PER_RECORD = 3
WAIT_S_MAX = 120.0


def marker_gate(topic: str, argument: str | None) -> TopicAdmission:
    """The test's `topicGate`: a topic named in the argument's "gated" list is admitted only
    once `<dir>/<topic>.cap` exists, capped at the offsets it holds; others freely."""
    settings = json.loads(argument or "{}")
    if topic not in settings.get("gated", []):
        return TopicAdmission(admitted=True)
    marker = Path(settings["dir"]) / f"{topic}.cap"
    if not marker.exists():
        return TopicAdmission(admitted=False)
    caps = json.loads(marker.read_text())
    return TopicAdmission(admitted=True, end_offsets={int(p): o for p, o in caps.items()})


class Collected:
    """The foreachBatch sink: rows by batch id (a batch Spark runs again after a restart
    replaces its first run, as an idempotent sink does)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches: dict[int, list[tuple]] = {}

    def __call__(self, frame, batch_id: int) -> None:
        rows = [tuple(row) for row in frame.collect()]
        with self._lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple]:
        with self._lock:
            return [row for rows in self.batches.values() for row in rows]


def start_query(spark, broker, checkpoint: Path, sink: Collected, gate_argument: str):
    frame = (spark.readStream.format(SOURCE_NAME).option("brokers", broker.address)
             .option("subscribePattern", r"flights\.pattern-.+")
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(RECORDS_PER_TRIGGER))
             .option("columns", json.dumps(COLUMNS))
             .option("topicGate", f"{__name__}:marker_gate")
             .option("topicGateArgument", gate_argument)
             .load())
    return (frame.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds").start())


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S_MAX
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def sorted_rows(rows) -> list[tuple]:
    return sorted(rows, key=repr)


def rows_of_client(rows, producer: RowsProducer) -> list[tuple]:
    return [row for row in rows if row[len(COLUMNS)] == producer.client_id]


def test_one_stream_follows_gated_and_new_topics_exactly_across_a_restart(
        spark, broker, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    free = RowsProducer(broker.address, f"flights.pattern-free-{suffix}", partitions=2,
                        rows_per_record=ROWS_PER_RECORD)
    gated = RowsProducer(broker.address, f"flights.pattern-gated-{suffix}", partitions=1,
                         rows_per_record=ROWS_PER_RECORD)
    unmatched = RowsProducer(broker.address, f"other.pattern-{suffix}", partitions=1)
    producers = [free, gated, unmatched]
    markers = tmp_path / "markers"
    markers.mkdir()
    gate_argument = json.dumps({"dir": str(markers), "gated": [gated.topic]})
    checkpoint, sink = tmp_path / "checkpoint", Collected()
    try:
        free.produce(5)  # 10 records: 5 micro-batches at 2 records each
        gated.produce(4)
        unmatched.produce(2)
        query = start_query(spark, broker, checkpoint, sink, gate_argument)
        query.processAllAvailable()

        # The gated topic is not read, not even in the offsets, before its marker exists.
        progress = query.recentProgress
        assert sorted_rows(sink.rows()) == sorted_rows(free.expected)
        assert all(p["numInputRows"] <= RECORDS_PER_TRIGGER * ROWS_PER_RECORD
                   for p in progress)
        assert len([p for p in progress if p["numInputRows"] > 0]) >= 5
        assert gated.topic not in json.loads(query.lastProgress["sources"][0]["endOffset"])

        # Admitted at offset 4's cap: more records written after it are never read.
        (markers / f"{gated.topic}.cap").write_text(json.dumps({"0": 3}))
        gated.produce(2)
        query.processAllAvailable()
        source = query.lastProgress["sources"][0]
        assert json.loads(source["endOffset"])[gated.topic] == {"0": 3}
        assert json.loads(source["latestOffset"])[gated.topic] == {"0": 3}  # the cap, not 6
        assert sorted_rows(rows_of_client(sink.rows(), gated)) == \
            sorted_rows(gated.rows_between([0], [3]))

        # Stopped in the middle of a backlog, then restarted from the checkpoint.
        before_stop = len(sink.rows())
        free.produce(6)
        wait_for(lambda: len(sink.rows()) > before_stop, "a first micro-batch of the backlog")
        query.stop()
        last_end = json.loads(query.lastProgress["sources"][0]["endOffset"])
        stopped_at = len(sink.rows())
        assert stopped_at < len(free.expected) + 3 * ROWS_PER_RECORD, \
            "the scenario: the query stops with rows still to read"
        free.produce(1)
        restarted = start_query(spark, broker, checkpoint, sink, gate_argument)
        wait_for(lambda: restarted.lastProgress is not None, "the restarted query's progress")
        first = restarted.recentProgress[0]["sources"][0]
        assert json.loads(first["startOffset"]) == last_end  # the checkpoint, not earliest

        # A topic created while the query runs is found and read from its start.
        late = RowsProducer(broker.address, f"flights.pattern-late-{suffix}", partitions=2,
                            rows_per_record=ROWS_PER_RECORD)
        producers.append(late)
        late.produce(3)
        expected = sorted_rows([*free.expected, *gated.rows_between([0], [3]),
                                *late.expected])
        wait_for(lambda: len(sink.rows()) >= len(expected), "every row")
        restarted.processAllAvailable()
        assert late.topic not in json.loads(first["endOffset"]), "the scenario: created later"
        assert late.topic in json.loads(restarted.lastProgress["sources"][0]["endOffset"])
        restarted.stop()
    finally:
        for producer in producers:
            producer.close()
        for running in spark.streams.active:
            running.stop()
    rows = sorted_rows(sink.rows())
    assert len(rows) == len(set(rows)), "a row came twice"
    assert rows == expected
    assert rows_of_client(rows, unmatched) == []
    assert len(expected) == (2 * 12 + 3 + 2 * 3) * ROWS_PER_RECORD


def tag_topic(table: pa.Table, topic: str) -> pa.Table:
    """An `arrowTransform`: each row's leg id and the topic its argument names."""
    return pa.table({"legId": table["legId"],
                     "topic": pa.array([topic] * table.num_rows, pa.string())})


def test_each_topic_gets_its_transform_argument_and_a_deleted_topic_is_dropped(
        spark, broker, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    kept = RowsProducer(broker.address, f"flights.tagged-kept-{suffix}", partitions=1)
    deleted = RowsProducer(broker.address, f"flights.tagged-gone-{suffix}", partitions=2)
    sink = Collected()
    try:
        kept.produce(2)
        deleted.produce(2)
        frame = (spark.readStream.format(SOURCE_NAME).option("brokers", broker.address)
                 .option("subscribePattern", rf"flights\.tagged-.+-{suffix}")
                 .option("startingOffsets", "earliest").option("columns", '["legId"]')
                 .option("includeIds", "false")
                 .option("arrowTransform", f"{__name__}:tag_topic")
                 .option("arrowTransformArgument", "topic={topic}").load())
        query = (frame.writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="100 milliseconds").start())
        query.processAllAvailable()
        assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {
            deleted.topic: {"0": 2, "1": 2}, kept.topic: {"0": 2}}
        with Admin(broker.address, **CLIENT_OPTIONS) as admin:
            admin.delete_topic(deleted.topic)
        kept.produce(1)
        wait_for(lambda: len(sink.rows()) == 7 * 3, "the kept topic's new rows")
        wait_for(lambda: deleted.topic not in json.loads(
            query.lastProgress["sources"][0]["endOffset"]), "the deleted topic dropped")
        assert query.exception() is None and query.isActive  # failOnDataLoss: read whole
        query.stop()
    finally:
        kept.close()
        deleted.close()
    assert sorted_rows(sink.rows()) == sorted_rows(
        [(row[0], f"topic={producer.topic}") for producer in (kept, deleted)
         for row in producer.expected])
