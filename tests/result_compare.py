"""Assertions over query results as multisets, numbers within QUERIES.md's 1e-9 relative
tolerance: the rule itself is scripts/bench/result_compare.py (the pipeline benchmark's gate
uses it too); here its differences become readable lines and assertion failures.

Shared by the Spark unit tests and the end-to-end tests: a row may come as a pyspark Row, a
tuple of Python values, or the text fields of a q*.csv line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import zip_longest

from scripts.bench.result_compare import (
    NUMERIC_COLUMNS,
    QUERY_COLUMNS,
    RELATIVE_TOLERANCE,
    show_row,
    unmatched_rows,
)

__all__ = ["NUMERIC_COLUMNS", "QUERY_COLUMNS", "RELATIVE_TOLERANCE", "assert_all_results",
           "assert_same_results", "result_differences"]

problems_shown_max = 20


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
