"""docs/queries.md's equality of query results: multisets of rows, numbers within 1e-9 relative.

The one rule shared by the tests (`assert_same_results`, `assert_all_results`), the session
check (oracle/session_check.py, for chaos-verify and the e2e tests) and the pipeline benchmark's
gate (scripts/bench/result_gate.py). A row may
come as a pyspark Row, a tuple of Python values, or the text fields of a q*.csv line; numeric
columns are read as floats, so every text that parses to a close enough double is equal
("1e2", "100.0", "100.00"); the other columns are compared as exact text (None reads as "").

Algorithm: rows are grouped by their text fields; inside a group both sides' number tuples are
sorted and merged, a pair matching when every number is within the tolerance. That pairs rows
correctly whenever distinct numbers of one group differ by more than the tolerance (legId is
not unique: one itinerary may appear with several fares).

Pure functions; thread-safe. Raises ResultShapeError (common/flights/result_csv.py) for a row
whose field count is not its query's, ResultValueError for a numeric field that is not a number;
the `assert_*` helpers raise ResultsDifferError (an AssertionError, so pytest reports a failed
test, and raised explicitly, so `python -O` keeps it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from common.flights.result_csv import QUERY_HEADERS, ResultShapeError

# docs/queries.md "Queries": the output columns, and which of them hold numbers.
QUERY_COLUMNS: dict[str, tuple[str, ...]] = QUERY_HEADERS
NUMERIC_COLUMNS = frozenset({"totalFare", "totalDistance", "avgFare", "maxFare"})
RELATIVE_TOLERANCE = 1e-9
problems_shown_max = 20

TextKey = tuple[str, ...]
Numbers = tuple[float, ...]


class ResultValueError(ValueError):
    """A numeric column of a result row holds something that does not read as a number."""

    query: str
    column: str
    value: object

    def __init__(self, query: str, column: str, value: object) -> None:
        super().__init__(f"{query} column {column} holds {value!r}, not a number")
        self.query = query
        self.column = column
        self.value = value


class ResultsDifferError(AssertionError):
    """Two sets of query results are not equal as docs/queries.md defines it; the message lists the
    first `problems_shown_max` differences."""


@dataclass(frozen=True)
class Unmatched:
    """The rows of each side that found no equal row on the other: both empty when the two
    multisets agree. Rows are in the query's column order, numbers as floats."""

    query: str
    actual: tuple[tuple[object, ...], ...]
    expected: tuple[tuple[object, ...], ...]

    @property
    def rows_differing(self) -> int:
        return len(self.actual) + len(self.expected)

    def __bool__(self) -> bool:
        return self.rows_differing > 0


def unmatched_rows(query: str, actual: Iterable[Sequence[object]],
                   expected: Iterable[Sequence[object]]) -> Unmatched:
    """Compare two multisets of `query` rows (module doc); what is left unmatched."""
    columns = QUERY_COLUMNS[query]
    actual_groups = _group(query, columns, actual)
    expected_groups = _group(query, columns, expected)
    only_actual, only_expected = [], []
    for key in sorted(actual_groups.keys() | expected_groups.keys()):
        got, want = _merge(actual_groups.get(key, []), expected_groups.get(key, []))
        only_actual += [_row(columns, key, numbers) for numbers in got]
        only_expected += [_row(columns, key, numbers) for numbers in want]
    return Unmatched(query, tuple(only_actual), tuple(only_expected))


def show_row(query: str, row: Sequence[object]) -> str:
    """`legId=...,route=...,totalFare=...` for messages."""
    return ",".join(f"{name}={value}" for name, value in zip(QUERY_COLUMNS[query], row,
                                                              strict=True))


def result_differences(
    query: str, actual: Iterable[Sequence[object]], expected: Iterable[Sequence[object]]
) -> list[str]:
    """Human-readable differences between two multisets of `query` rows; [] when they agree:
    one line per row left unmatched, an actual row shown beside an expected one where both
    sides left some."""
    unmatched = unmatched_rows(query, actual, expected)
    problems = []
    for got, want in zip_longest(unmatched.actual, unmatched.expected):
        got_text = show_row(query, got) if got is not None else "no such row"
        want_text = show_row(query, want) if want is not None else "no such row"
        problems.append(f"{query}: got {got_text}, expected {want_text}")
    return problems


def assert_same_results(
    query: str, actual: Iterable[Sequence[object]], expected: Iterable[Sequence[object]]
) -> None:
    """Raises ResultsDifferError unless the two multisets of `query` rows are equal."""
    problems = result_differences(query, actual, expected)
    if problems:
        shown = "\n".join(problems[:problems_shown_max])
        raise ResultsDifferError(f"{len(problems)} differences in {query}:\n{shown}")


def assert_all_results(
    actual: Mapping[str, Iterable[Sequence[object]]],
    expected: Mapping[str, Iterable[Sequence[object]]],
) -> None:
    """Every query of QUERY_COLUMNS, each a multiset comparison; raises ResultsDifferError
    when a query is missing on either side or any of them differs."""
    if not set(actual) == set(expected) == set(QUERY_COLUMNS):
        raise ResultsDifferError(f"queries {sorted(actual)} against {sorted(expected)}, "
                                 f"expected {sorted(QUERY_COLUMNS)}")
    problems = []
    for query in QUERY_COLUMNS:
        problems += result_differences(query, actual[query], expected[query])
    if problems:
        shown = "\n".join(problems[:problems_shown_max])
        raise ResultsDifferError(f"{len(problems)} differences:\n{shown}")


def _group(query: str, columns: tuple[str, ...],
           rows: Iterable[Sequence[object]]) -> dict[TextKey, list[Numbers]]:
    groups: dict[TextKey, list[Numbers]] = defaultdict(list)
    for row in rows:
        if len(row) != len(columns):
            raise ResultShapeError(f"{query} row {tuple(row)!r} does not have columns {columns}")
        fields = list(zip(columns, row, strict=True))
        text = tuple(_text(value) for column, value in fields if column not in NUMERIC_COLUMNS)
        numbers = tuple(_number(query, column, value) for column, value in fields
                        if column in NUMERIC_COLUMNS)
        groups[text].append(numbers)
    for numbers in groups.values():
        numbers.sort()
    return groups


def _merge(got: list[Numbers], want: list[Numbers]) -> tuple[list[Numbers], list[Numbers]]:
    """Two sorted lists walked side by side: what each keeps without a close partner."""
    only_got, only_want = [], []
    i = j = 0
    while i < len(got) and j < len(want):
        if _close(got[i], want[j]):
            i, j = i + 1, j + 1
        elif got[i] < want[j]:
            only_got.append(got[i])
            i += 1
        else:
            only_want.append(want[j])
            j += 1
    return only_got + got[i:], only_want + want[j:]


def _row(columns: tuple[str, ...], key: TextKey, numbers: Numbers) -> tuple[object, ...]:
    texts, values = iter(key), iter(numbers)
    return tuple(next(values) if column in NUMERIC_COLUMNS else next(texts)
                 for column in columns)


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _number(query: str, column: str, value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise ResultValueError(query, column, value) from error


def _close(got: Numbers, want: Numbers) -> bool:
    return all(math.isclose(g, w, rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0)
               for g, w in zip(got, want, strict=True))
