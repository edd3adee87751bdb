"""Compare query results as multisets, numbers within QUERIES.md's 1e-9 relative tolerance.

Shared by the Spark unit tests and the end-to-end tests: a row may come as a pyspark Row, a
tuple of Python values, or the text fields of a q*.csv line; numeric columns are read as floats,
the others compared as exact text (None reads as "").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

# QUERIES.md "Queries": the output columns, and which of them hold numbers.
QUERY_COLUMNS: dict[str, tuple[str, ...]] = {
    "q1": ("legId", "route", "totalFare", "stopovers"),
    "q2": ("legId", "route", "totalDistance"),
    "q3": ("legId", "route", "stopovers", "travelDuration"),
    "q4": ("route", "avgFare", "maxFare"),
}
NUMERIC_COLUMNS = frozenset({"totalFare", "totalDistance", "avgFare", "maxFare"})
RELATIVE_TOLERANCE = 1e-9
problems_shown_max = 20


def result_differences(
    query: str, actual: Iterable[Sequence[object]], expected: Iterable[Sequence[object]]
) -> list[str]:
    """Human-readable differences between two multisets of `query` rows; [] when they agree.

    Rows agree when their text fields are equal and each number is within the tolerance.
    Rows with the same text fields are paired in order of their numbers, which pairs them
    correctly whenever distinct numbers differ by more than the tolerance.
    """
    columns = QUERY_COLUMNS[query]
    actual_groups = _group(columns, actual, "actual")
    expected_groups = _group(columns, expected, "expected")
    problems = []
    for key in sorted(actual_groups.keys() | expected_groups.keys()):
        got, want = actual_groups.get(key, []), expected_groups.get(key, [])
        if len(got) != len(want):
            problems.append(f"{query} {_show(columns, key)}: {len(got)} rows, expected {len(want)}")
            continue
        for got_numbers, want_numbers in zip(got, want, strict=True):
            if not _close(got_numbers, want_numbers):
                problems.append(
                    f"{query} {_show(columns, key)}: numbers {got_numbers}, expected {want_numbers}"
                )
    return problems


def assert_same_results(
    query: str, actual: Iterable[Sequence[object]], expected: Iterable[Sequence[object]]
) -> None:
    problems = result_differences(query, actual, expected)
    shown = "\n".join(problems[:problems_shown_max])
    assert not problems, f"{len(problems)} differences in {query}:\n{shown}"


def assert_all_results(
    actual: Mapping[str, Iterable[Sequence[object]]],
    expected: Mapping[str, Iterable[Sequence[object]]],
) -> None:
    """Every query of QUERY_COLUMNS, each a multiset comparison."""
    assert set(actual) == set(expected) == set(QUERY_COLUMNS), (sorted(actual), sorted(expected))
    problems = []
    for query in QUERY_COLUMNS:
        problems += result_differences(query, actual[query], expected[query])
    shown = "\n".join(problems[:problems_shown_max])
    assert not problems, f"{len(problems)} differences:\n{shown}"


def _group(
    columns: tuple[str, ...], rows: Iterable[Sequence[object]], side: str
) -> dict[tuple[str, ...], list[tuple[float, ...]]]:
    groups: dict[tuple[str, ...], list[tuple[float, ...]]] = defaultdict(list)
    for row in rows:
        assert len(row) == len(columns), f"{side} row {row!r} does not have columns {columns}"
        fields = list(zip(columns, row, strict=True))
        text = tuple(_text(v) for c, v in fields if c not in NUMERIC_COLUMNS)
        numbers = tuple(float(v) for c, v in fields if c in NUMERIC_COLUMNS)
        groups[text].append(numbers)
    for numbers in groups.values():
        numbers.sort()
    return groups


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _close(got: tuple[float, ...], want: tuple[float, ...]) -> bool:
    return all(
        math.isclose(g, w, rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0)
        for g, w in zip(got, want, strict=True)
    )


def _show(columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    names = [c for c in columns if c not in NUMERIC_COLUMNS]
    return ",".join(f"{n}={v}" for n, v in zip(names, key, strict=True))
