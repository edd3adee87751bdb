"""The `kaska` source in Spark against a real broker: exact rows for offset ranges over several
partitions, sliced ranges, empty ranges, inferred columns, streaming across a restart."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from common.kaska import Admin, Consumer, Producer
from spark.service.session_workers import is_malformed_payload
from spark.source.kaska_source import EXTRA_COLUMNS, SOURCE_NAME, KaskaDataSource, offsets_json
from tests.integration.spark.kaska_rows import CLIENT_OPTIONS, COLUMNS, RowsProducer

pytestmark = pytest.mark.integration


def kaska_reader(spark, broker, topic, starts=None, ends=None, **options):
    reader = (spark.read.format(SOURCE_NAME).option("brokers", broker.address)
              .option("topic", topic))
    if starts is not None:
        reader = reader.option("startingOffsets", offsets_json(topic, starts))
    if ends is not None:
        reader = reader.option("endingOffsets", offsets_json(topic, ends))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def rows_of(frame) -> list[tuple]:
    return by_repr(tuple(row) for row in frame.collect())


def by_repr(rows) -> list[tuple]:
    """Rows in one order whatever they hold (None sorts with strings)."""
    return sorted(rows, key=repr)


@pytest.fixture(scope="module")
def loaded(broker):
    """3 partitions x 4 batches x 2 records x 3 rows, so ranges can start or end mid-batch."""
    producer = RowsProducer(broker.address, "flights.batch-ranges", partitions=3,
                            rows_per_record=3, records_per_batch=2)
    producer.produce(4)
    yield producer
    producer.close()


def test_a_whole_topic_reads_back_every_row_once(spark, broker, loaded):
    frame = kaska_reader(spark, broker, loaded.topic, columns=json.dumps(COLUMNS)).load()
    assert frame.columns == [*COLUMNS, *EXTRA_COLUMNS]
    assert rows_of(frame) == by_repr(loaded.expected)
    assert len(loaded.expected) == 3 * 4 * 2 * 3


def test_explicit_ranges_read_exactly_those_offsets(spark, broker, loaded):
    starts, ends = [1, 0, 3], [6, 3, 3]  # partition 2: an empty range
    frame = kaska_reader(spark, broker, loaded.topic, starts, ends,
                         columns=json.dumps(COLUMNS)).load()
    expected = by_repr(loaded.rows_between(starts, ends))
    assert rows_of(frame) == expected
    assert len(expected) == (5 + 3) * 3
    assert frame.rdd.getNumPartitions() == 2  # one input partition per non-empty range


def test_sliced_ranges_cover_the_same_rows(spark, broker, loaded):
    starts, ends = [0, 2, 1], [8, 7, 2]
    frame = kaska_reader(spark, broker, loaded.topic, starts, ends, offsetsPerSliceMax="3",
                         columns=json.dumps(COLUMNS)).load()
    assert frame.rdd.getNumPartitions() == 3 + 2 + 1
    assert rows_of(frame) == by_repr(loaded.rows_between(starts, ends))


def test_an_empty_range_is_no_rows_with_the_full_schema(spark, broker, loaded):
    frame = kaska_reader(spark, broker, loaded.topic, [4, 4, 4], [4, 4, 4]).load()
    assert frame.columns == [*COLUMNS, *EXTRA_COLUMNS]  # columns from the first record at 4
    assert frame.collect() == []


def test_columns_are_taken_from_the_first_record_and_projected_on_request(spark, broker, loaded):
    frame = kaska_reader(spark, broker, loaded.topic, [0, 0, 0], [1, 0, 0]).load()
    assert frame.columns == [*COLUMNS, *EXTRA_COLUMNS]
    projected = kaska_reader(spark, broker, loaded.topic, [0, 0, 0], [1, 0, 0],
                             columns='["note", "legId"]').load()
    assert rows_of(projected) == by_repr(
        (row[2], row[0], *row[3:]) for row in loaded.rows_between([0, 0, 0], [1, 0, 0]))


def start_stream(spark, broker, topic, out_dir, checkpoint_dir):
    frame = (spark.readStream.format(SOURCE_NAME).option("brokers", broker.address)
             .option("topic", topic).option("startingOffsets", "earliest")
             .option("columns", json.dumps(COLUMNS)).load())
    return (frame.writeStream.format("parquet").option("path", str(out_dir))
            .option("checkpointLocation", str(checkpoint_dir))
            .trigger(processingTime="200 milliseconds").start())


def test_streaming_resumes_from_its_checkpoint_without_loss_or_repeat(spark, broker, tmp_path):
    producer = RowsProducer(broker.address, "flights.streamed", partitions=2)
    out_dir, checkpoint_dir = tmp_path / "out", tmp_path / "checkpoint"
    try:
        producer.produce(2)
        query = start_stream(spark, broker, producer.topic, out_dir, checkpoint_dir)
        query.processAllAvailable()
        producer.produce(3)
        query.processAllAvailable()
        query.stop()
        producer.produce(2)  # written while no query runs
        restarted = start_stream(spark, broker, producer.topic, out_dir, checkpoint_dir)
        restarted.processAllAvailable()
        first_start = json.loads(restarted.recentProgress[0]["sources"][0]["startOffset"])
        restarted.stop()
    finally:
        producer.close()
    # where the first query stopped, not earliest
    assert first_start == {producer.topic: {"0": 5, "1": 5}}
    written = rows_of(spark.read.parquet(str(out_dir)))
    assert written == by_repr(producer.expected)
    assert len(producer.expected) == 2 * 7 * 3


def test_stream_commit_stores_the_offsets_for_the_group(broker, loaded):
    reader = KaskaDataSource({"brokers": broker.address, "topic": loaded.topic,
                              "columns": json.dumps(COLUMNS), "commitGroup": "lag-watch"})
    stream = reader.streamReader(reader.schema())
    assert stream.latestOffset() == {loaded.topic: {"0": 8, "1": 8, "2": 8}}
    stream.commit({loaded.topic: {"0": 3, "1": 8, "2": 0}})
    stream.stop()
    with Consumer(broker.address, "lag-watch") as consumer:
        assert [consumer.committed(loaded.topic, p) for p in range(3)] == [3, 8, 0]


def test_a_payload_that_inflates_past_its_bound_fails_the_read_by_name(spark, broker):
    """A hostile record (a zstd frame of ~2 KB that would inflate to 72 MiB) fails in the Spark
    Python worker with RowsPayloadTooLargeError, before it is inflated, and the driver sees the
    error by name: the query service gives such a session up at once (session_workers.py)."""
    topic = "flights.hostile-payload"
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic, 1)
    bomb = pa.Codec("zstd").compress(bytes(72 * 1024 * 1024), asbytes=True)
    assert len(bomb) < 64 * 1024, "the scenario: a small frame that claims a huge payload"
    with Producer(broker.address, str(uuid.uuid4()), **CLIENT_OPTIONS) as producer:
        producer.send_batch(topic, 0, [bomb])
    frame = kaska_reader(spark, broker, topic, [0], [1], columns=json.dumps(COLUMNS)).load()
    with pytest.raises(PySparkException) as raised:
        frame.collect()
    assert is_malformed_payload(raised.value), str(raised.value)[-2000:]


def upper_notes(table: pa.Table) -> pa.Table:
    """An `arrowTransform` for the test below: the note upper-cased, the leg id's length."""
    return pa.table({"NOTE": pa.compute.utf8_upper(table["note"]),
                     "legLength": pa.compute.utf8_length(table["legId"]).cast(pa.int64())})


def test_an_arrow_transform_shapes_the_rows_and_the_schema_without_ids(spark, broker, loaded):
    frame = kaska_reader(spark, broker, loaded.topic, columns='["legId", "note"]',
                         includeIds="false",
                         arrowTransform=f"{__name__}:upper_notes").load()
    assert frame.schema.simpleString() == "struct<NOTE:string,legLength:bigint>"
    assert rows_of(frame) == by_repr(
        (row[2].upper() if row[2] is not None else None, len(row[0]))
        for row in loaded.expected)


def prefixed_notes(table: pa.Table, prefix: str) -> pa.Table:
    """An `arrowTransform` with an argument: the note after `prefix`."""
    return pa.table({"note": pa.compute.binary_join_element_wise(prefix, table["note"], "")})


def test_an_arrow_transform_argument_reaches_the_transform(spark, broker, loaded):
    frame = kaska_reader(spark, broker, loaded.topic, columns='["note"]', includeIds="false",
                         arrowTransform=f"{__name__}:prefixed_notes",
                         arrowTransformArgument="seen: ").load()
    assert rows_of(frame) == by_repr(
        ("seen: " + row[2] if row[2] is not None else None,) for row in loaded.expected)


def test_an_arrow_transform_that_cannot_be_found_is_refused_when_planned(spark, broker, loaded):
    with pytest.raises(PySparkException, match="arrowTransform"):
        kaska_reader(spark, broker, loaded.topic, columns='["legId"]',
                     arrowTransform="spark.no_such_module:derive").load()
