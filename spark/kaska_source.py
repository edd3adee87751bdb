"""`kaska`: a PySpark Python data source over Kaska topics (batch and streaming).

    spark.dataSource.register(KaskaDataSource)
    frame = (spark.read.format("kaska")
             .option("brokers", "127.0.0.1:9092").option("topic", "flights.<cid>")
             .option("startingOffsets", '{"flights.<cid>": {"0": 0, "1": 0}}')
             .option("endingOffsets", '{"flights.<cid>": {"0": 120, "1": 118}}')
             .option("columns", '["legId", "totalFare"]')      # optional projection
             .load())

Options (names case-insensitive, as Spark's Kafka source where they overlap):
- `brokers` (required): `HOST:PORT[,HOST:PORT...]`; `topic` (required): one topic; `token`.
- `startingOffsets`: `earliest` (batch default), `latest` (streaming default) or JSON
  `{"<topic>": {"<partition>": offset}}` where -2 means earliest and -1 latest; a partition left
  out starts at its earliest offset.
- `endingOffsets` (batch only): `latest` (default) or JSON like the above; a partition left out
  ends at its latest offset. Latest is resolved once, when the read is planned.
- `columns`: JSON list of the CSV columns to return. Without it the columns are those of the
  first record in the range (every column the client sent).
- `includeIds`: `true` (default) or `false`: whether the output carries the three id columns
  below. A job that never reads them says `false`: per row they are the widest strings it
  would move into the JVM (the 36-character client id alone is ~72 MB per 2M rows).
- `arrowTransform`: `module:function`, a function from a `pyarrow.Table` of the `columns`
  (required with it; ids too unless `includeIds` is false) to the table Spark gets, applied
  in the Python worker to every batch of up to `arrowBatchRowsMax` rows: derived fields
  computed vectorised where the rows are decoded (e.g. `spark.flight_fields:derive`). The
  output schema is the function's answer for an empty table, so it must not depend on the
  rows. `arrowTransformArgument` (a string) is passed as its second argument when given
  (e.g. a session's airports as JSON).
- `offsetsPerSliceMax`: split a partition's range into input partitions of at most this many
  offsets (records) each (default: one input partition per topic partition).
- `fetchBytesMax`, `retryDeadlineS` (how long a task rides out an unavailable broker before
  failing), `arrowBatchRowsMax` (rows per Arrow batch handed to Spark), `commitGroup`
  (streaming: commit each finished micro-batch's end offsets for this group, for lag
  monitoring; Spark's checkpoint, not the group, is what a restarted query resumes from).

Output: one row per CSV row, every column a string named by the CSV header, then (unless
`includeIds` is false) `client_id` (string: the batch's producer id, which the client sets to
its client id; the topic's suffix after its first "." for batches written without one),
`message_id` (long: the batch's sequence number) and `row_id` (long: the row's number in its
file). (client_id, message_id, row_id) is unique per row, so a duplicate would show.

Payload (the contract with the client, `common/arrow_rows.py`): each Kaska record is one Arrow
IPC stream (schema + one record batch; plain, in one LZ4/Zstandard frame, or with compressed
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
short range; a failed task is re-run by Spark from its range's start).

Thread-safety: the classes are plain picklable values; each `read()` opens and closes its own
connection.
"""

from __future__ import annotations

import importlib
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from common.arrow_rows import ROW_ID, open_rows, read_rows
from common.kaska.consumer import Consumer
from common.kaska.range_reader import (
    FETCH_BYTES_MAX_DEFAULT,
    RETRY_DEADLINE_S_DEFAULT,
    RangeReader,
)
from common.kaska.record_batch import BatchHeader

SOURCE_NAME = "kaska"
CLIENT_ID, MESSAGE_ID = "client_id", "message_id"
EXTRA_COLUMNS = (CLIENT_ID, MESSAGE_ID, ROW_ID)
EARLIEST, LATEST = "earliest", "latest"
EARLIEST_SENTINEL, LATEST_SENTINEL = -2, -1  # Kafka's markers inside the JSON form
ARROW_BATCH_ROWS_MAX_DEFAULT = 10_000

# Offsets per partition, or "earliest" / "latest" for all of them.
OffsetSpec = str | dict[int, int]


class KaskaOptionsError(ValueError):
    """A `kaska` source option that is missing or does not parse."""


# --- options ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KaskaOptions:
    brokers: str
    topic: str
    starting: OffsetSpec
    ending: OffsetSpec
    columns: tuple[str, ...] | None
    token: str | None = None
    fetch_bytes_max: int = FETCH_BYTES_MAX_DEFAULT
    retry_deadline_s: float = RETRY_DEADLINE_S_DEFAULT
    offsets_per_slice_max: int | None = None
    arrow_batch_rows_max: int = ARROW_BATCH_ROWS_MAX_DEFAULT
    commit_group: str | None = None
    include_ids: bool = True
    arrow_transform: str | None = None
    arrow_transform_argument: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> KaskaOptions:
        lowered = {key.lower(): value for key, value in options.items()}
        brokers, topic = lowered.get("brokers"), lowered.get("topic")
        if not brokers or not topic:
            raise KaskaOptionsError("the kaska source needs the `brokers` and `topic` options")
        default_start = LATEST if streaming else EARLIEST
        return cls(
            brokers=brokers,
            topic=topic,
            starting=parse_offsets(lowered.get("startingoffsets", default_start), topic),
            ending=parse_offsets(lowered.get("endingoffsets", LATEST), topic),
            columns=_parse_columns(lowered.get("columns")),
            token=lowered.get("token"),
            fetch_bytes_max=_positive(lowered, "fetchbytesmax", int, FETCH_BYTES_MAX_DEFAULT),
            retry_deadline_s=_positive(lowered, "retrydeadlines", float,
                                       RETRY_DEADLINE_S_DEFAULT),
            offsets_per_slice_max=_positive(lowered, "offsetsperslicemax", int, None),
            arrow_batch_rows_max=_positive(lowered, "arrowbatchrowsmax", int,
                                           ARROW_BATCH_ROWS_MAX_DEFAULT),
            commit_group=lowered.get("commitgroup"),
            include_ids=_boolean(lowered, "includeids", True),
            arrow_transform=_arrow_transform_name(lowered),
            arrow_transform_argument=_arrow_transform_argument(lowered),
        )

    def range_reader(self) -> RangeReader:
        return RangeReader(self.brokers, token=self.token, fetch_bytes_max=self.fetch_bytes_max,
                           retry_deadline_s=self.retry_deadline_s)


def parse_offsets(text: str, topic: str) -> OffsetSpec:
    """`earliest`, `latest`, or `{"<topic>": {"<partition>": offset}}` -> {partition: offset}."""
    if text.strip().lower() in (EARLIEST, LATEST):
        return text.strip().lower()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise KaskaOptionsError(f"offsets option is not JSON: {error}") from error
    if not isinstance(document, dict) or set(document) != {topic}:
        raise KaskaOptionsError(f"offsets JSON must name exactly the topic {topic!r}: {text!r}")
    per_partition = document[topic]
    if not isinstance(per_partition, dict):
        raise KaskaOptionsError(f"offsets of {topic!r} must be an object: {text!r}")
    offsets = {}
    for key, offset in per_partition.items():
        offset_ok = (isinstance(offset, int) and not isinstance(offset, bool)
                     and offset >= EARLIEST_SENTINEL)
        if not (str(key).isdigit() and offset_ok):
            raise KaskaOptionsError(f"bad partition offset {key!r}: {offset!r}")
        offsets[int(key)] = offset
    return offsets


def offsets_json(topic: str, offsets: Mapping[int, int] | list[int]) -> str:
    """The JSON form of per-partition offsets (a list is indexed by partition)."""
    items = enumerate(offsets) if isinstance(offsets, list) else offsets.items()
    return json.dumps({topic: {str(partition): offset for partition, offset in items}})


def _parse_columns(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    try:
        columns = json.loads(text)
    except json.JSONDecodeError as error:
        raise KaskaOptionsError(f"`columns` is not a JSON list: {error}") from error
    if not (isinstance(columns, list) and all(isinstance(c, str) and c for c in columns)):
        raise KaskaOptionsError(f"`columns` must be a JSON list of names: {text!r}")
    if len(set(columns)) != len(columns) or set(columns) & set(EXTRA_COLUMNS):
        raise KaskaOptionsError(f"`columns` repeats a name or names one of {EXTRA_COLUMNS}")
    return tuple(columns)


def _arrow_transform_name(options: Mapping[str, str]) -> str | None:
    name = options.get("arrowtransform")
    if name is None:
        return None
    if "columns" not in options:
        raise KaskaOptionsError("`arrowTransform` needs the `columns` it reads")
    load_transform(name)  # fails here, on the driver, rather than in every task
    return name


def _arrow_transform_argument(options: Mapping[str, str]) -> str | None:
    argument = options.get("arrowtransformargument")
    if argument is not None and "arrowtransform" not in options:
        raise KaskaOptionsError("`arrowTransformArgument` needs an `arrowTransform`")
    return argument


def load_transform(name: str) -> Callable[[pa.Table], pa.Table]:
    """The function named `module:function`."""
    module_name, _, function_name = name.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise KaskaOptionsError(f"arrowTransform {name!r}: {error}") from error
    if not callable(function):
        raise KaskaOptionsError(f"arrowTransform {name!r} is not a function")
    return function


def _boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in options:
        return default
    text = str(options[key]).strip().lower()
    if text not in ("true", "false"):
        raise KaskaOptionsError(f"option {key} must be true or false, got {options[key]!r}")
    return text == "true"


def _positive(options: Mapping[str, str], key: str, kind, default):
    if key not in options:
        return default
    try:
        value = kind(options[key])
    except ValueError as error:
        raise KaskaOptionsError(f"option {key}: {error}") from error
    if value <= 0:
        raise KaskaOptionsError(f"option {key} must be positive, got {value}")
    return value


# --- planning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


def resolve_offsets(spec: OffsetSpec, reader: RangeReader, topic: str,
                    default: str) -> dict[int, int]:
    """Concrete offsets of every partition of `topic` for a spec (sentinels resolved)."""
    partitions = range(reader.partition_count(topic))
    given = {} if isinstance(spec, str) else spec
    unknown = set(given) - set(partitions)
    if unknown:
        raise KaskaOptionsError(f"{topic} has no partitions {sorted(unknown)}")
    resolved = {}
    for partition in partitions:
        offset = given.get(partition, spec if isinstance(spec, str) else default)
        if offset in (EARLIEST, EARLIEST_SENTINEL, LATEST, LATEST_SENTINEL):
            start, end = reader.offsets(topic, partition)
            offset = start if offset in (EARLIEST, EARLIEST_SENTINEL) else end
        resolved[partition] = offset
    return resolved


def plan_ranges(topic: str, starts: Mapping[int, int], ends: Mapping[int, int],
                offsets_per_slice_max: int | None = None) -> list[OffsetRange]:
    """The non-empty ranges between `starts` and `ends`, sliced to at most
    `offsets_per_slice_max` offsets each; a partition missing from `starts` starts at 0."""
    ranges = []
    for partition in sorted(ends):
        start, end = starts.get(partition, 0), ends[partition]
        if end < start:
            raise KaskaOptionsError(f"{topic}/{partition}: end offset {end} before start {start}")
        step = offsets_per_slice_max or max(end - start, 1)
        for slice_start in range(start, end, step):
            ranges.append(OffsetRange(topic, partition, slice_start, min(end, slice_start + step)))
    return ranges


# --- rows -------------------------------------------------------------------------------------


def output_schema(columns: tuple[str, ...], include_ids: bool = True) -> StructType:
    fields = [StructField(name, StringType(), True) for name in columns]
    if include_ids:
        fields += [StructField(CLIENT_ID, StringType(), True),
                   StructField(MESSAGE_ID, LongType(), True),
                   StructField(ROW_ID, LongType(), True)]
    return StructType(fields)


def client_id_of(header: BatchHeader, topic: str) -> str:
    if header.idempotent:
        return str(uuid.UUID(bytes=header.producer_id))
    return topic.partition(".")[2] or topic


def payload_columns(payload: bytes) -> tuple[str, ...]:
    """The CSV columns of one rows payload (its schema without `row_id`)."""
    schema = _read_schema(payload)
    return tuple(name for name in schema.names if name != ROW_ID)


def _read_schema(payload: bytes) -> pa.Schema:
    with open_rows(payload) as stream:
        return stream.schema


class RowsConverter:
    """Rows payloads -> columns of the output schema.

    A column the payload lacks comes out null; a non-string one is cast to string. The whole
    payload's frame decompresses as a whole; with compressed buffers only the columns asked for
    are decompressed. One per task.
    """

    def __init__(self, columns: tuple[str, ...], include_ids: bool = True) -> None:
        self.columns = columns
        self.include_ids = include_ids

    def arrays(self, payload: bytes, client_id: str, message_id: int) -> list[pa.Array]:
        table = read_rows(payload, self.columns)
        names = set(table.schema.names)
        rows = table.num_rows
        arrays = [_as_type(table.column(name).combine_chunks(), pa.string()) if name in names
                  else pa.nulls(rows, pa.string()) for name in self.columns]
        if not self.include_ids:
            return arrays
        row_ids = table.column(ROW_ID).combine_chunks()
        arrays += [pa.repeat(pa.scalar(client_id, pa.string()), rows),
                   pa.repeat(pa.scalar(message_id, pa.int64()), rows),
                   _as_type(row_ids, pa.int64())]
        return arrays


def _as_type(array: pa.Array, kind: pa.DataType) -> pa.Array:
    return array if array.type == kind else array.cast(kind)


class BatchAssembler:
    """Gathers per-record columns and emits Arrow batches of about `rows_max` rows."""

    def __init__(self, arrow_schema: pa.Schema, rows_max: int) -> None:
        self._schema = arrow_schema
        self._rows_max = rows_max
        self._pending: list[list[pa.Array]] = []
        self._rows = 0

    def add(self, arrays: list[pa.Array]) -> pa.RecordBatch | None:
        self._pending.append(arrays)
        self._rows += len(arrays[0])
        return self.flush() if self._rows >= self._rows_max else None

    def flush(self) -> pa.RecordBatch | None:
        if not self._rows:
            self._pending.clear()
            return None
        columns = [pa.concat_arrays([arrays[i] for arrays in self._pending])
                   for i in range(len(self._schema))]
        self._pending, self._rows = [], 0
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def read_range(options: KaskaOptions, columns: tuple[str, ...], arrow_schema: pa.Schema,
               offset_range: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of `arrow_schema` holding exactly the rows of the records in
    `offset_range` (through the `arrowTransform` when there is one)."""
    if not isinstance(offset_range, OffsetRange):
        # Spark plans one placeholder partition when `partitions()` found no data.
        return
    batches = _range_batches(options, columns, offset_range)
    if options.arrow_transform is None:
        yield from batches
        return
    transform = _bound_transform(options)
    for batch in batches:
        yield from _conformed(transform(pa.Table.from_batches([batch])), arrow_schema)


def _bound_transform(options: KaskaOptions) -> Callable[[pa.Table], pa.Table]:
    """`options.arrow_transform` as a function of the table alone."""
    assert options.arrow_transform is not None
    transform, argument = load_transform(options.arrow_transform), options.arrow_transform_argument
    if argument is None:
        return transform
    return lambda table: transform(table, argument)


def _range_batches(options: KaskaOptions, columns: tuple[str, ...],
                   offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's rows: `columns` as strings, then the ids unless left out."""
    converter = RowsConverter(columns, options.include_ids)
    assembler = BatchAssembler(_arrow_schema(output_schema(columns, options.include_ids)),
                               options.arrow_batch_rows_max)
    with options.range_reader() as reader:
        records = reader.read(offset_range.topic, offset_range.partition, offset_range.start,
                              offset_range.end)
        for record in records:
            client_id = client_id_of(record.header, offset_range.topic)
            batch = assembler.add(converter.arrays(record.value, client_id,
                                                   record.header.sequence))
            if batch is not None:
                yield batch
    batch = assembler.flush()
    if batch is not None:
        yield batch


def _conformed(table: pa.Table, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A transform's table as batches of exactly `schema` (Spark checks them against it)."""
    if table.schema.names != schema.names:
        raise KaskaOptionsError(f"arrowTransform returned columns {table.schema.names}, "
                                f"not {schema.names}")
    yield from table.cast(schema).combine_chunks().to_batches()


def transform_schema(options: KaskaOptions) -> StructType:
    """The Spark schema of what `options.arrow_transform` makes of the `columns`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    assert options.columns is not None and options.arrow_transform is not None
    empty = _arrow_schema(output_schema(options.columns, options.include_ids)).empty_table()
    return from_arrow_schema(_bound_transform(options)(empty).schema)


def _arrow_schema(schema: StructType) -> pa.Schema:
    # The very conversion Spark checks yielded batches against.
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _columns_of(schema: StructType) -> tuple[str, ...]:
    return tuple(name for name in schema.fieldNames() if name not in EXTRA_COLUMNS)


# --- the data source --------------------------------------------------------------------------


class KaskaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        options = KaskaOptions.parse(self.options)
        if options.arrow_transform is not None:
            return transform_schema(options)
        columns = options.columns
        if columns is None:
            columns = self._first_record_columns(options)
        return output_schema(columns, options.include_ids)

    def _first_record_columns(self, options: KaskaOptions) -> tuple[str, ...]:
        """The columns of the first record at or after the starting offsets (none if empty)."""
        with options.range_reader() as reader:
            starts = resolve_offsets(options.starting, reader, options.topic, EARLIEST)
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
        self.columns = options.columns if options.arrow_transform else _columns_of(schema)
        self.schema = schema

    def partitions(self) -> list[OffsetRange]:
        options = self.options
        with options.range_reader() as reader:
            starts = resolve_offsets(options.starting, reader, options.topic, EARLIEST)
            ends = resolve_offsets(options.ending, reader, options.topic, LATEST)
        return plan_ranges(options.topic, starts, ends, options.offsets_per_slice_max)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, self.columns, _arrow_schema(self.schema), partition)


class KaskaStreamReader(DataSourceStreamReader):
    """Offsets: `{"<partition>": next offset}` over every partition (new ones start at 0)."""

    def __init__(self, options: KaskaOptions, schema: StructType) -> None:
        self.options = options
        self.columns = options.columns if options.arrow_transform else _columns_of(schema)
        self.schema = schema

    def initialOffset(self) -> dict:
        with self.options.range_reader() as reader:
            starts = resolve_offsets(self.options.starting, reader, self.options.topic, EARLIEST)
        return _offset_dict(starts)

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        with self.options.range_reader() as reader:
            return _offset_dict(dict(enumerate(reader.end_offsets(self.options.topic))))

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        return plan_ranges(self.options.topic, _partition_offsets(start),
                           _partition_offsets(end), self.options.offsets_per_slice_max)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, self.columns, _arrow_schema(self.schema), partition)

    def commit(self, end: dict) -> None:
        if self.options.commit_group is None:
            return
        with Consumer(self.options.brokers, self.options.commit_group,
                      token=self.options.token) as consumer:
            for partition, offset in _partition_offsets(end).items():
                consumer.commit(self.options.topic, offset, partition)


def _offset_dict(offsets: Mapping[int, int]) -> dict:
    return {str(partition): offset for partition, offset in sorted(offsets.items())}


def _partition_offsets(offsets: Mapping[str, int]) -> dict[int, int]:
    return {int(partition): int(offset) for partition, offset in offsets.items()}


def register(spark) -> None:
    """Make `spark.read.format("kaska")` (and readStream) available in this session."""
    spark.dataSource.register(KaskaDataSource)
