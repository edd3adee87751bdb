"""Reading the `kaska` source's rows: offset ranges (Spark input partitions), their planning,
and the decoding of rows payloads into Arrow batches of the output schema, in the Python worker.

Exactness: each input partition is one offset range [start, end) of one topic partition, read
by its task over its own connection with `common.kaska.range_reader` (retries with backoff
through broker restarts and leader changes, never a record twice, raises rather than return a
short range; a failed task is re-run by Spark from its range's start). With `failOnDataLoss`
false, records deleted before the task reads them are skipped with a warning (Kafka's
semantics); otherwise that is a `KaskaDataLossError`.

Thread-safety: plain picklable values; each `read_range` opens and closes its own connection.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType

from common.flights.arrow_rows import ROW_ID, open_rows, read_rows
from common.kaska.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from common.kaska.range_reader import RangeReader, RangeRecord
from common.kaska.record_batch import BatchHeader
from spark.source.kaska_options import (
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
    transform_argument,
)
from spark.source.kaska_plan import DATA_LOSS_HINT, KaskaDataLossError

log = logging.getLogger(__name__)


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
    transform = bound_transform(options, offset_range.topic)
    for batch in batches:
        yield from _conformed(transform(pa.Table.from_batches([batch])), arrow_schema)


def bound_transform(options: KaskaOptions, topic: str) -> Callable[[pa.Table], pa.Table]:
    """`options.arrow_transform` for the rows of `topic`, as a function of the table alone
    (`{topic}` in its argument replaced by `topic`)."""
    assert options.arrow_transform is not None
    transform = load_transform(options.arrow_transform)
    argument = transform_argument(options.arrow_transform_argument, topic)
    if argument is None:
        return transform
    return lambda table: transform(table, argument)


def _range_batches(options: KaskaOptions, columns: tuple[str, ...],
                   offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's rows: `columns` as strings, then the ids unless left out."""
    converter = RowsConverter(columns, options.include_ids)
    assembler = BatchAssembler(arrow_schema_of(output_schema(columns, options.include_ids)),
                               options.arrow_batch_rows_max)
    with options.range_reader() as reader:
        for record in range_records(reader, offset_range, options.fail_on_data_loss):
            client_id = client_id_of(record.header, offset_range.topic)
            batch = assembler.add(converter.arrays(record.value, client_id,
                                                   record.header.sequence))
            if batch is not None:
                yield batch
    batch = assembler.flush()
    if batch is not None:
        yield batch


def range_records(reader: RangeReader, offset_range: OffsetRange,
                  fail_on_data_loss: bool = True) -> Iterator[RangeRecord]:
    """The records of `offset_range`. Records deleted before they are read (the log start
    moved past them, or their topic was deleted): KaskaDataLossError, or with
    `fail_on_data_loss` false a warning and the records still there."""
    topic, partition = offset_range.topic, offset_range.partition
    position = offset_range.start
    while position < offset_range.end:
        try:
            for record in reader.read(topic, partition, position, offset_range.end):
                yield record
                position = record.offset + 1
            return
        except (OffsetOutOfRangeError, UnknownTopicOrPartitionError) as error:
            if fail_on_data_loss:
                raise KaskaDataLossError(f"{topic}/{partition} [{position}, "
                                         f"{offset_range.end}): {error} {DATA_LOSS_HINT}") \
                    from error
            if isinstance(error, UnknownTopicOrPartitionError):
                log.warning("%s/%s deleted: offsets [%d, %d) skipped", topic, partition,
                            position, offset_range.end)
                return
            log_start, _ = reader.offsets(topic, partition)
            if log_start <= position:
                raise  # not a deletion after all: a real failure
            log.warning("%s/%s: offsets [%d, %d) were deleted before they were read: skipped",
                        topic, partition, position, min(log_start, offset_range.end))
            position = log_start


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
    empty = arrow_schema_of(output_schema(options.columns, options.include_ids)).empty_table()
    return from_arrow_schema(bound_transform(options, options.topic or "")(empty).schema)


def arrow_schema_of(schema: StructType) -> pa.Schema:
    # The very conversion Spark checks yielded batches against.
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def columns_of(schema: StructType) -> tuple[str, ...]:
    return tuple(name for name in schema.fieldNames() if name not in EXTRA_COLUMNS)
