"""The text of q1.csv ... q4.csv (docs/queries.md "Queries"): header rows and CSV lines.

Result values travel already formatted as text (ResultRows in common/flights/session_records.py), so
writing a file is: the query's header line, then one line per row. Lines are comma-separated,
RFC-4180 quoted where a field holds a comma, a quote or a line break (the csv module's minimal
quoting), and end in "\\n". A float is written as Python's `repr`, the shortest text that reads
back as the same double; an integer as its digits; a missing value as "". Shared by whoever
writes or checks these files (the query service formats the values, the client writes them).

Pure functions; thread-safe.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

QUERY_HEADERS: dict[str, tuple[str, ...]] = {
    "q1": ("legId", "route", "totalFare", "stopovers"),
    "q2": ("legId", "route", "totalDistance"),
    "q3": ("legId", "route", "stopovers", "travelDuration"),
    "q4": ("route", "avgFare", "maxFare"),
}
LINE_END = "\n"


class ResultShapeError(ValueError):
    """A result row whose field count is not its query's column count."""


def csv_line(fields: Sequence[str]) -> str:
    """One CSV record, line end included."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator=LINE_END).writerow(fields)
    return buffer.getvalue()


def csv_text(query: str, rows: Iterable[Sequence[str]]) -> str:
    """The whole file: header line, then one line per row (rows must fit the header)."""
    header = QUERY_HEADERS[query]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=LINE_END)
    writer.writerow(header)
    for row in rows:
        if len(row) != len(header):
            raise ResultShapeError(f"{query} rows have {len(header)} fields, got {len(row)}")
        writer.writerow(row)
    return buffer.getvalue()


def format_field(value: object) -> str:
    """The CSV text of one result value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        raise TypeError("no query result holds a boolean")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int | str):
        return str(value)
    raise TypeError(f"unexpected result value of type {type(value).__name__}: {value!r}")


def format_row(query: str, row: Sequence[object]) -> list[str]:
    """The fields of one result row (a pyspark Row is a tuple in header order)."""
    header = QUERY_HEADERS[query]
    assert len(row) == len(header), f"{query} rows have {len(header)} fields, got {len(row)}"
    return [format_field(value) for value in row]


def csv_lines(query: str, rows: Iterable[Sequence[str]]) -> list[str]:
    """Header line then one line per row of already formatted fields, each ending in "\\n"."""
    return [csv_line(QUERY_HEADERS[query]), *(csv_line(row) for row in rows)]
