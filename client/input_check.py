"""The input files checked before a session starts, so that a file the queries cannot use is
refused with one line naming it, before any session id, topic or broker connection.

A file is refused (`InputFileError`: the file's role, its path, the problem) when it
- does not exist, is not a regular file (a directory, a pipe), or cannot be opened and read;
- is empty;
- has a header the client's reader refuses (client.csv_reader.read_header: not UTF-8, not one
  CSV row, an empty or a repeated name);
- lacks a column the queries read (docs/queries.md "Inputs": seven of the flights file, three
  of the airports file), read with the same dialect as the upload;
- has a first block (client.csv_reader.BLOCK_BYTES_DEFAULT, as the upload reads it) that pyarrow
  cannot parse, or whose rows the reader refuses every one of (binary junk after a plausible
  header, an unterminated quote swallowing the block).

Malformed rows in a file that passes are not refusals: the upload counts and reports them
(client.csv_reader). The check reads the header line and one block of each file, whatever the
file's size, and contacts nothing.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from client.csv_reader import (
    AIRPORTS_DIALECT,
    BLOCK_BYTES_DEFAULT,
    FLIGHTS_DIALECT,
    CsvDialect,
    CsvReaderError,
    CsvSliceReader,
)
from common.flights.input_columns import AIRPORT_COLUMNS, FLIGHT_COLUMNS

# docs/queries.md "Inputs": the columns the queries read; the others are uploaded untouched.
FLIGHTS_REQUIRED_COLUMNS = FLIGHT_COLUMNS
AIRPORTS_REQUIRED_COLUMNS = AIRPORT_COLUMNS
HEADER_SHOWN_CHARS_MAX = 160  # of the header quoted in a missing-columns message


class InputFileError(Exception):
    """An input file the session cannot use; the message names the file and the problem."""

    def __init__(self, role: str, path: Path, problem: str) -> None:
        super().__init__(_one_line(f"{role} file {path}: {problem}"))
        self.role = role
        self.path = path
        self.problem = problem


@dataclass(frozen=True, slots=True)
class InputLayout:
    """What one kind of input file must look like."""

    role: str  # how messages name the file: "flights", "airports"
    dialect: CsvDialect
    required_columns: tuple[str, ...]


FLIGHTS_LAYOUT = InputLayout("flights", FLIGHTS_DIALECT, FLIGHTS_REQUIRED_COLUMNS)
AIRPORTS_LAYOUT = InputLayout("airports", AIRPORTS_DIALECT, AIRPORTS_REQUIRED_COLUMNS)


def check_input_files(flights: Path, airports: Path) -> None:
    """Raises InputFileError for the first of the two files that cannot be used."""
    check_input_file(flights, FLIGHTS_LAYOUT)
    check_input_file(airports, AIRPORTS_LAYOUT)


def check_input_file(path: Path, layout: InputLayout,
                     block_bytes: int = BLOCK_BYTES_DEFAULT) -> None:
    """Raises InputFileError when `path` cannot be used as a `layout` file (module doc)."""
    _check_non_empty_regular_file(path, layout)
    row_callback_errors: list[BaseException] = []
    try:
        reader = CsvSliceReader(path, layout.dialect, batch_rows=1, block_bytes=block_bytes,
                                samples_max=0)  # no log lines: the refusal is the one line
        _check_required_columns(path, layout, reader.columns)
        with _row_callback_errors_kept(row_callback_errors):
            rows_accepted = reader.first_block_rows()
    except CsvReaderError as error:
        problem = error.problem
        if any(isinstance(kept, UnicodeDecodeError) for kept in row_callback_errors):
            problem += " (a row with the wrong number of fields holds bytes that are not UTF-8)"
        raise InputFileError(layout.role, path, problem) from error
    except OSError as error:  # permissions, I/O errors: the stat above only saw the entry
        raise InputFileError(layout.role, path, f"cannot read: {_reason(error)}") from error
    if rows_accepted == 0 and reader.rejected.total:
        counts = ", ".join(f"{kind} {count}" for kind, count in reader.rejected.counts.items()
                           if count)
        raise InputFileError(layout.role, path,
                             f"none of the rows in its first {block_bytes:,} bytes can be read "
                             f"({counts})")


@contextmanager
def _row_callback_errors_kept(kept: list[BaseException]) -> Iterator[None]:
    """pyarrow cannot hand a row with the wrong number of fields to the reader's callback when
    the row is not UTF-8: it reports that through sys.unraisablehook (a traceback on stderr)
    and fails the block. While the check reads, such errors are kept for its one line instead.
    Safe: the check runs before the client starts any thread."""
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: kept.append(unraisable.exc_value)
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _check_non_empty_regular_file(path: Path, layout: InputLayout) -> None:
    try:
        status = path.stat()
    except FileNotFoundError as error:
        raise InputFileError(layout.role, path, "no such file") from error
    except NotADirectoryError as error:
        raise InputFileError(layout.role, path,
                             "no such file (a parent of it is not a directory)") from error
    except OSError as error:
        raise InputFileError(layout.role, path, f"cannot read: {_reason(error)}") from error
    if stat.S_ISDIR(status.st_mode):
        raise InputFileError(layout.role, path, "is a directory, not a file")
    if not stat.S_ISREG(status.st_mode):
        raise InputFileError(layout.role, path, "not a regular file")
    if status.st_size == 0:
        raise InputFileError(layout.role, path, "empty file (no header row)")


def _check_required_columns(path: Path, layout: InputLayout, columns: list[str]) -> None:
    missing = [name for name in layout.required_columns if name not in columns]
    if not missing:
        return
    shown = ", ".join(columns)
    if len(shown) > HEADER_SHOWN_CHARS_MAX:
        shown = shown[:HEADER_SHOWN_CHARS_MAX] + "..."
    noun = "column" if len(missing) == 1 else "columns"
    raise InputFileError(
        layout.role, path,
        f"missing {noun} {', '.join(missing)} (its header split on "
        f"{layout.dialect.delimiter!r}: {shown})")


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _one_line(text: str) -> str:
    """`text` with its unprintable characters escaped: a header or a path may hold line breaks,
    and a refusal is one line."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)
