"""Streaming CSV reader: a CSV file as slices of `batch_rows` rows, every column a string.

pyarrow's streaming reader (`pyarrow.csv.open_csv`) parses the file block by block (one block of
`block_bytes` plus its read-ahead in memory, whatever the file size). Every column is read as
binary and then checked as UTF-8, so that a row with undecodable bytes can be rejected alone
instead of failing the whole block. Rows the reader cannot take are counted by kind, a few are
kept as samples for the log, and they are not part of any slice:

    wrong_field_count   a row with more or fewer fields than the header (an unterminated quote
                        swallows the rest of the file into one such row)
    undecodable_bytes   a row holding bytes that are not UTF-8

Rows that parse but break the queries' validity rules are ordinary rows here: they are data.

Each slice is a `pa.RecordBatch` with the header's columns as `string` plus `row_id` (int64): the
row's 0-based number among the rows the reader accepted from this file, so a file without
rejected rows numbers its rows exactly as its lines (minus the header). Slices hold exactly
`batch_rows` rows except the last one. The same file always yields the same slices, which is
what lets a resumed upload skip the slices already acknowledged.

The header is parsed here with the csv module (a UTF-8 byte-order mark is dropped, as pyarrow
drops it from the data); a header that does not decode, is empty or repeats a name raises
`MalformedHeaderError`. pyarrow's parser cannot recover from a quote left open across a block
boundary (an unbalanced quote in a large file): that ends the read with `CsvParseError`, which
says where; within one block the open quote swallows the rest of the block into one rejected row.

Thread-safety: a `CsvSliceReader` is used by one thread; its `rejected` counts may be read by
another thread (plain int updates).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from common.flights.arrow_rows import ROW_ID, with_row_ids

log = logging.getLogger(__name__)

WRONG_FIELD_COUNT = "wrong_field_count"
UNDECODABLE_BYTES = "undecodable_bytes"
REJECT_KINDS = (WRONG_FIELD_COUNT, UNDECODABLE_BYTES)
BYTE_ORDER_MARK = b"\xef\xbb\xbf"
# pyarrow reads about ten blocks ahead: 1 MiB blocks keep the reader near 100 MB of memory
# (measured: 190 MB peak RSS of the whole process on a 750 MB file, 260 MB with 2 MiB blocks),
# at the same speed.
BLOCK_BYTES_DEFAULT = 1024 * 1024
HEADER_BYTES_MAX = 1024 * 1024
# A slice of about this many bytes of CSV text: per-message costs (a produce request, its
# replication, a sender's round trip, a record in every reader) shrink with the messages
# (300-row slices made 6,667 messages of 2M rows, 1 MiB slices 715, 4 MiB ~180).
# Measured side by side at 2M rows (docs/benchmarks.md "Ledger"), 4 MiB against 1 MiB: the
# upload 6.7 -> 5.5 s, the three brokers 6.7 -> 5.3 CPU-s, the client's peak RSS 300 -> 400 MB
# (up to 4 slices wait per sender).
SLICE_BYTES_DEFAULT = 4 * 1024 * 1024
SLICE_ROWS_MAX = 1_000_000
SAMPLES_MAX_DEFAULT = 5
SAMPLE_CHARS_MAX = 200


class CsvReaderError(Exception):
    """Base of the reader's errors: the file as a whole cannot be read. `problem` says why
    without naming the file (client.input_check names it its own way)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class MalformedHeaderError(CsvReaderError):
    """A header row that is missing, not UTF-8, too long, not one CSV row, has an empty or a
    repeated name, or that pyarrow splits differently."""


class CsvParseError(CsvReaderError):
    """The parser lost its place: a quoted field runs across more than a block (an unbalanced
    quote in a large file), so no later row boundary can be trusted."""


@dataclass(frozen=True, slots=True)
class CsvDialect:
    """How one kind of input file is written."""

    delimiter: str
    newlines_in_values: bool = True  # RFC-4180: a quoted field may hold a line break


FLIGHTS_DIALECT = CsvDialect(delimiter=",")
AIRPORTS_DIALECT = CsvDialect(delimiter=";")


@dataclass(frozen=True, slots=True)
class RejectedSample:
    kind: str
    line: int  # 1-based line of the file where the row starts; -1 when unknown
    text: str  # at most SAMPLE_CHARS_MAX characters of the row


@dataclass
class RejectedRows:
    """Rows the reader refused, by kind, with the first `samples_max` of them."""

    samples_max: int = SAMPLES_MAX_DEFAULT
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECT_KINDS, 0))
    samples: list[RejectedSample] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, kind: str, line: int, text: str) -> None:
        self.counts[kind] += 1
        if len(self.samples) < self.samples_max:
            sample = RejectedSample(kind, line, text[:SAMPLE_CHARS_MAX])
            self.samples.append(sample)
            log.warning("rejected row (%s) at line %d: %r", kind, line, sample.text)


def read_header(path: Path, dialect: CsvDialect) -> list[str]:
    """The column names of the file's first row."""
    with open(path, "rb") as file:
        first = file.readline(HEADER_BYTES_MAX + 1)
    if len(first) > HEADER_BYTES_MAX:
        raise MalformedHeaderError(path, f"header longer than {HEADER_BYTES_MAX} bytes")
    try:
        text = first.removeprefix(BYTE_ORDER_MARK).decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedHeaderError(path, f"header is not UTF-8: {error}") from error
    try:
        rows = list(csv.reader([text.rstrip("\r\n")], delimiter=dialect.delimiter))
    except csv.Error as error:  # a carriage return inside the line
        raise MalformedHeaderError(path, f"header is not one CSV row: {error}") from error
    names = rows[0] if rows else []
    if not names or any(not name for name in names):
        raise MalformedHeaderError(path, f"empty header or empty column name in {names!r}")
    if len(set(names)) != len(names) or ROW_ID in names:
        raise MalformedHeaderError(path, f"repeated or reserved column name in {names!r}")
    return names


def rows_per_slice(path: Path, slice_bytes: int, sample_bytes: int = BLOCK_BYTES_DEFAULT) -> int:
    """Rows of about `slice_bytes` of the file's text, from its mean line length over the
    first `sample_bytes` after the header. A function of the file alone, so a resumed run
    slices it exactly as the first run did (its checkpoint checks the file's size)."""
    assert slice_bytes >= 1 and sample_bytes >= 1
    with open(path, "rb") as file:
        file.readline(HEADER_BYTES_MAX + 1)
        sample = file.read(sample_bytes)
    if len(sample) == sample_bytes:  # cut short: the whole lines only
        sample = sample[:sample.rfind(b"\n") + 1]
    lines = sample.count(b"\n") + (1 if sample and not sample.endswith(b"\n") else 0)
    if not lines:
        return 1
    return max(1, min(SLICE_ROWS_MAX, slice_bytes * lines // len(sample)))


class CsvSliceReader:
    """Iterates the slices of one file (format and rules: module doc)."""

    def __init__(self, path: str | Path, dialect: CsvDialect, batch_rows: int,
                 block_bytes: int = BLOCK_BYTES_DEFAULT,
                 samples_max: int = SAMPLES_MAX_DEFAULT) -> None:
        assert batch_rows >= 1 and block_bytes >= 1024
        self.path = Path(path)
        self.dialect = dialect
        self.batch_rows = batch_rows
        self.block_bytes = block_bytes
        self.rejected = RejectedRows(samples_max)
        self.rows_accepted = 0
        # Bytes of the file behind the slices handed out so far, to a block (the reader's own
        # read-ahead position runs megabytes ahead and would make progress bars lie).
        self.bytes_parsed = 0
        self.file_bytes = self.path.stat().st_size
        self.columns = read_header(self.path, dialect)

    def slices(self) -> Iterator[pa.RecordBatch]:
        """Every slice of the file, in order; a fresh pass each call (counts restart)."""
        self.rejected = RejectedRows(self.rejected.samples_max)
        self.rows_accepted = 0
        self.bytes_parsed = 0
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for rows in self._decoded_blocks():
            # Numbered per block (one row-id column per block, sliced with it): per slice it
            # cost a third of the reader's own time.
            block = with_row_ids(rows, self.rows_accepted)
            self.rows_accepted += rows.num_rows
            start = 0
            if pending_rows:
                take = min(self.batch_rows - pending_rows, block.num_rows)
                pending.append(block.slice(0, take))
                pending_rows += take
                start = take
                if pending_rows < self.batch_rows:
                    continue
                yield pa.concat_batches(pending)
                pending, pending_rows = [], 0
            while block.num_rows - start >= self.batch_rows:
                yield block.slice(start, self.batch_rows)
                start += self.batch_rows
            if start < block.num_rows:
                pending, pending_rows = [block.slice(start)], block.num_rows - start
        if pending_rows:
            yield pa.concat_batches(pending)

    def first_block_rows(self) -> int:
        """How many rows of the file's first block the reader accepts, its refused rows
        counted in `rejected` (counts restart): a look at the data bounded by one block (and
        pyarrow's read-ahead), for client.input_check before an upload. Raises what `slices`
        raises when that block cannot be parsed."""
        self.rejected = RejectedRows(self.rejected.samples_max)
        with self._arrow_reader() as reader:
            block = self._next_block(reader)
        if block is None or not block.num_rows:
            return 0
        return self._utf8_rows(block).num_rows

    def _decoded_blocks(self) -> Iterator[pa.RecordBatch]:
        with self._arrow_reader() as reader:
            while (block := self._next_block(reader)) is not None:
                self.bytes_parsed = min(self.file_bytes, self.bytes_parsed + self.block_bytes)
                if block.num_rows:
                    yield self._utf8_rows(block)
            self.bytes_parsed = self.file_bytes

    @contextmanager
    def _arrow_reader(self) -> Iterator[pa_csv.CSVStreamingReader]:
        """pyarrow's streaming reader of the file, every header column as binary, its schema
        checked against our header."""
        with pa.input_stream(self.path) as stream:
            try:  # pyarrow parses the first block here already, for the schema
                reader = pa_csv.open_csv(
                    stream,
                    read_options=pa_csv.ReadOptions(use_threads=False,
                                                    block_size=self.block_bytes),
                    parse_options=pa_csv.ParseOptions(
                        delimiter=self.dialect.delimiter,
                        newlines_in_values=self.dialect.newlines_in_values,
                        invalid_row_handler=self._on_invalid_row,
                    ),
                    convert_options=pa_csv.ConvertOptions(
                        column_types={name: pa.binary() for name in self.columns},
                        strings_can_be_null=False,
                        quoted_strings_can_be_null=False,
                    ),
                )
            except pa.ArrowInvalid as error:
                raise CsvParseError(self.path, f"cannot parse the first block: {error}") from error
            self._check_schema(reader.schema)
            yield reader

    def _next_block(self, reader) -> pa.RecordBatch | None:
        try:
            return reader.read_next_batch()
        except StopIteration:
            return None
        except pa.ArrowInvalid as error:
            raise CsvParseError(
                self.path, f"cannot parse past byte ~{self.bytes_parsed + self.block_bytes:,} "
                f"(after {self.rows_accepted:,} rows): {error}") from error

    def _check_schema(self, schema: pa.Schema) -> None:
        # pyarrow parses the header itself; a disagreement with ours (a header that only
        # pyarrow splits differently) would shift every column, so it is refused.
        if schema.names != self.columns or any(t != pa.binary() for t in schema.types):
            raise MalformedHeaderError(
                self.path, f"header {self.columns!r} read by pyarrow as {schema.names!r}")

    def _on_invalid_row(self, row) -> str:
        self.rejected.add(WRONG_FIELD_COUNT, row.number, row.text)
        return "skip"

    def _utf8_rows(self, block: pa.RecordBatch) -> pa.RecordBatch:
        """The block as string columns, without the rows holding bytes that are not UTF-8."""
        try:
            return _as_strings(block)  # the cast validates UTF-8: one pass in the usual case
        except pa.ArrowInvalid:
            pass
        # The rare slow path: find the rows holding the bad bytes.
        bad = np.zeros(block.num_rows, dtype=bool)
        for column in block.columns:
            bad |= _undecodable_mask(column)
        for index in np.flatnonzero(bad):
            text = b"|".join(column[int(index)].as_py() for column in block.columns)
            self.rejected.add(UNDECODABLE_BYTES, -1, text.decode("utf-8", "replace"))
        return _as_strings(block.filter(pa.array(~bad)))


def _as_strings(block: pa.RecordBatch) -> pa.RecordBatch:
    """Binary columns as `string`; raises ArrowInvalid when a value is not UTF-8."""
    return pa.RecordBatch.from_arrays([column.cast(pa.string()) for column in block.columns],
                                      names=block.schema.names)


def _all_utf8(columns: pa.RecordBatch | pa.Array) -> bool:
    arrays = columns.columns if isinstance(columns, pa.RecordBatch) else [columns]
    try:
        for array in arrays:
            array.cast(pa.string())
    except pa.ArrowInvalid:
        return False
    return True


def _undecodable_mask(column: pa.Array) -> np.ndarray:
    if _all_utf8(column):
        return np.zeros(len(column), dtype=bool)
    return np.array([not _is_utf8(value) for value in column.to_pylist()], dtype=bool)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
