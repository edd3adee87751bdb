"""The multiset comparison helper: equal within 1e-9 relative, and it does fail otherwise."""

from __future__ import annotations

import pytest

from oracle.result_compare import assert_all_results, assert_same_results, result_differences

Q1 = [("a", "ATL-BOS", 100.0, "X||Y||Z"), ("a", "ATL-BOS", 200.0, "X||Y||Z"),
      ("b", "BOS-ATL", 1.5, "P||Q||R")]


def test_order_and_representation_do_not_matter():
    as_text = [("b", "BOS-ATL", "1.5", "P||Q||R"), ("a", "ATL-BOS", "200.00", "X||Y||Z"),
               ("a", "ATL-BOS", "1e2", "X||Y||Z")]
    assert result_differences("q1", as_text, Q1) == []


def test_numbers_within_relative_tolerance():
    near = [(r[0], r[1], r[2] * (1 + 5e-10), r[3]) for r in Q1]
    far = [(r[0], r[1], r[2] * (1 + 5e-9), r[3]) for r in Q1]
    assert result_differences("q1", near, Q1) == []
    assert len(result_differences("q1", far, Q1)) == 3


def test_missing_extra_and_duplicate_rows_are_reported():
    assert result_differences("q1", Q1[:2], Q1)  # a row missing
    assert result_differences("q1", [*Q1, Q1[2]], Q1)  # a row twice
    assert result_differences("q1", [*Q1[:2], ("b", "BOS-ATL", 1.5, "P||Q")], Q1)
    with pytest.raises(AssertionError, match="differences in q1"):
        assert_same_results("q1", Q1[1:], Q1)


def test_all_queries_required():
    empty = {"q1": [], "q2": [], "q3": [], "q4": []}
    assert_all_results(empty, empty)
    with pytest.raises(AssertionError):
        assert_all_results({"q1": []}, empty)
    with pytest.raises(AssertionError, match="q4"):
        assert_all_results({**empty, "q4": [("ATL-BOS", 1.0, 2.0)]}, empty)
