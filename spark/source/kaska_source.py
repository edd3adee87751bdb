r"""`kaska`: a PySpark Python data source over Kaska topics (batch and streaming).

    spark.dataSource.register(KaskaDataSource)
    frame = (spark.read.format("kaska")
             .option("brokers", "127.0.0.1:9092").option("topic", "flights.<cid>")
             .option("startingOffsets", '{"flights.<cid>": {"0": 0, "1": 0}}')
             .option("endingOffsets", '{"flights.<cid>": {"0": 120, "1": 118}}')
             .option("columns", '["legId", "totalFare"]')      # optional projection
             .load())
    stream = (spark.readStream.format("kaska")                 # every session's topic
              .option("brokers", "127.0.0.1:9092").option("subscribePattern", r"flights\..+")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500")
              .option("columns", '["legId", "totalFare"]')
              .option("topicGate", "spark.sessions:gate")     # which topics, how far
              .load())

Options (names case-insensitive, as Spark's Kafka source where they overlap):
- `brokers` (required): `HOST:PORT[,HOST:PORT...]`; `token`.
- `topic`: one topic. `subscribePattern` (streaming only): a Python regular expression that
  must match a topic's whole name (`re.fullmatch`). A stream takes exactly one of the two, a
  batch read `topic`. The topics are listed again in every micro-batch's planning: a topic
  created later is read from its earliest offset, a deleted one is dropped from the offsets.
- `startingOffsets`: `earliest` (batch default), `latest` (streaming default) or JSON
  `{"<topic>": {"<partition>": offset}, ...}` where -2 means earliest and -1 latest; a partition
  left out starts at its earliest offset (and, streaming, so does a topic left out). With
  `subscribePattern` the JSON may name only topics the pattern matches. Streaming, it applies
  to the topics present when a new query starts; a restarted query resumes from its checkpoint.
- `endingOffsets` (batch only): `latest` (default) or JSON like the above; a partition left out
  ends at its latest offset. Latest is resolved once, when the read is planned.
- `maxOffsetsPerTrigger` (streaming): at most this many records (offsets; a record holds many
  CSV rows) per micro-batch, shared over the partitions with data in proportion to their lag
  (Spark's default read limit; `Trigger.AvailableNow` and the like pass "all" and it is
  ignored, as Spark's contract says).
- `failOnDataLoss` (streaming, `true` by default): records deleted before the stream read them
  (the log start moved past its position, or the topic was deleted with records unread) fail
  the query with `KaskaDataLossError`; `false` logs a warning and goes on from the log start
  (or drops the topic), as Kafka's source does. A topic deleted after it was read whole is
  dropped quietly either way.
- `topicGate` (streaming): `module:function`, `gate(topic, topicGateArgument) ->
  TopicAdmission` (spark/source/kaska_gate.py), asked on the driver about every matched topic when a
  micro-batch is planned: whether to read it yet, and the offsets never to read past. Without
  it every matched topic is read, uncapped. `topicGateArgument`: its second argument (None
  without it).
- `columns`: JSON list of the CSV columns to return. Without it the columns are those of the
  first record in the range (every column the client sent); required with `subscribePattern`.
- `includeIds`: `true` (default) or `false`: whether the output carries the three id columns
  below. A job that never reads them says `false`: per row they are the widest strings it
  would move into the JVM (the 36-character client id alone is ~72 MB per 2M rows).
- `arrowTransform`: `module:function`, a function from a `pyarrow.Table` of the `columns`
  (required with it; ids too unless `includeIds` is false) to the table Spark gets, applied
  in the Python worker to every batch of up to `arrowBatchRowsMax` rows: derived fields
  computed vectorised where the rows are decoded (e.g. `spark.rules.flight_fields:derive`). The
  output schema is the function's answer for an empty table, so it must not depend on the
  rows. `arrowTransformArgument` (a string) is passed as its second argument when given
  (e.g. a session's airports as JSON); the literal text `{topic}` in it is replaced (plain
  text replacement, not `str.format`) by the topic of the rows being transformed, so one
  stream over many sessions hands each session's rows their session's argument. For the
  schema (no rows, no partition) it is replaced by the `topic` option, or by "" with
  `subscribePattern`.
- `offsetsPerSliceMax`: split a partition's range into input partitions of at most this many
  offsets (records) each (default: one input partition per topic partition).
- `fetchBytesMax`, `retryDeadlineS` (how long a task rides out an unavailable broker before
  failing), `arrowBatchRowsMax` (rows per Arrow batch handed to Spark), `commitGroup`
  (streaming: commit each finished micro-batch's end offsets, per topic partition, for this
  group, for lag monitoring; Spark's checkpoint, not the group, is what a restarted query
  resumes from).

Streaming offsets (Spark's checkpoint, the progress's start/end/latest offsets) are
`{"<topic>": {"<partition>": next offset}}` over every followed topic, with `topic` too
(spark/source/kaska_plan.py; a checkpoint of the earlier one-topic form `{"<partition>": offset}` is
still read). The stream reader and its planning: spark/source/kaska_stream.py,
spark/source/kaska_plan.py.

Output: one row per CSV row, every column a string named by the CSV header, then (unless
`includeIds` is false) `client_id` (string: the batch's producer id, which the client sets to
its client id; the topic's suffix after its first "." for batches written without one),
`message_id` (long: the batch's sequence number) and `row_id` (long: the row's number in its
file). (client_id, message_id, row_id) is unique per row, so a duplicate would show.

Payload (the contract with the client, `common/flights/arrow_rows.py`): each Kaska record is one
Arrow IPC stream (schema + one record batch; plain, in one LZ4/Zstandard frame, or with compressed
buffers) holding a slice of CSV rows
with *all* their columns as strings plus `row_id`. Why: `read()` must hand Spark Arrow record
batches (about 3x the rows/s of Python tuples on this machine), and an IPC payload becomes one
with no per-row Python work at all: decode, select, append three constant/row-id columns,
concatenate. All columns travel because the platform keeps complete data (new queries need no
client change); the `columns` option hands Spark only the columns a query reads.
Strings keep the CSV text exact (no float rounding, validity rules see the original text).

Exactness: each input partition is one offset range [start, end) of one topic partition, read
by its task over its own connection with `common.kaska.range_reader` (retries with backoff
through broker restarts and leader changes, never a record twice, raises rather than return a
short range; a failed task is re-run by Spark from its range's start): spark/source/kaska_read.py.
A stream's micro-batch is a fixed set of such ranges (Spark's checkpoint holds its offsets), so
a query stopped and restarted from its checkpoint reads each record once.

Thread-safety: the classes are plain picklable values; each `read()` opens and closes its own
connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from spark.source.kaska_gate import TopicAdmission
from spark.source.kaska_options import (
    ARROW_BATCH_ROWS_MAX_DEFAULT,
    CLIENT_ID,
    EARLIEST,
    EARLIEST_SENTINEL,
    EXTRA_COLUMNS,
    LATEST,
    LATEST_SENTINEL,
    MESSAGE_ID,
    KaskaOptions,
    KaskaOptionsError,
    OffsetSpec,
    load_transform,
    offsets_json,
    parse_offsets,
    topic_spec,
)
from spark.source.kaska_plan import KaskaDataLossError
from spark.source.kaska_read import (
    BatchAssembler,
    OffsetRange,
    RowsConverter,
    arrow_schema_of,
    client_id_of,
    columns_of,
    output_schema,
    payload_columns,
    plan_ranges,
    read_range,
    resolve_offsets,
    transform_schema,
)
from spark.source.kaska_stream import KaskaStreamReader

SOURCE_NAME = "kaska"

__all__ = [
    "ARROW_BATCH_ROWS_MAX_DEFAULT", "CLIENT_ID", "EARLIEST", "EARLIEST_SENTINEL",
    "EXTRA_COLUMNS", "LATEST", "LATEST_SENTINEL", "MESSAGE_ID", "SOURCE_NAME", "BatchAssembler",
    "KaskaBatchReader", "KaskaDataLossError", "KaskaDataSource", "KaskaOptions",
    "KaskaOptionsError", "KaskaStreamReader", "OffsetRange", "OffsetSpec", "RowsConverter",
    "TopicAdmission", "arrow_schema_of", "client_id_of", "columns_of", "load_transform",
    "offsets_json", "output_schema", "parse_offsets", "payload_columns", "plan_ranges",
    "read_range", "register", "resolve_offsets",
]


# --- the data source --------------------------------------------------------------------------


class KaskaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        # Spark asks the schema of batch reads and streams alike; only a stream subscribes.
        subscribes = any(key.lower() == "subscribepattern" for key in self.options)
        options = KaskaOptions.parse(self.options, streaming=subscribes)
        if options.arrow_transform is not None:
            return transform_schema(options)
        columns = options.columns
        if columns is None:
            columns = self._first_record_columns(options)
        return output_schema(columns, options.include_ids)

    def _first_record_columns(self, options: KaskaOptions) -> tuple[str, ...]:
        """The columns of the first record at or after the starting offsets (none if empty)."""
        assert options.topic is not None, "a subscription without `columns` is refused"
        with options.range_reader() as reader:
            starts = resolve_offsets(topic_spec(options.starting, options.topic), reader,
                                     options.topic, EARLIEST)
            for partition, start in sorted(starts.items()):
                _, end = reader.offsets(options.topic, partition)
                if start >= end:
                    continue
                for record in reader.read(options.topic, partition, start, start + 1):
                    return payload_columns(record.value)
        return ()

    def reader(self, schema: StructType) -> KaskaBatchReader:
        return KaskaBatchReader(KaskaOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> KaskaStreamReader:
        return KaskaStreamReader(KaskaOptions.parse(self.options, streaming=True), schema)


class KaskaBatchReader(DataSourceReader):
    def __init__(self, options: KaskaOptions, schema: StructType) -> None:
        self.options = options
        self.columns = options.columns if options.arrow_transform else columns_of(schema)
        self.schema = schema

    def partitions(self) -> list[OffsetRange]:
        options, topic = self.options, self.options.topic
        assert topic is not None, "a batch read has a `topic` (KaskaOptions.parse)"
        with options.range_reader() as reader:
            starts = resolve_offsets(topic_spec(options.starting, topic), reader, topic, EARLIEST)
            ends = resolve_offsets(topic_spec(options.ending, topic), reader, topic, LATEST)
        return plan_ranges(topic, starts, ends, options.offsets_per_slice_max)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, self.columns, arrow_schema_of(self.schema), partition)


def register(spark) -> None:
    """Make `spark.read.format("kaska")` (and readStream) available in this session."""
    spark.dataSource.register(KaskaDataSource)
