"""Result rows as q*.csv text: round-tripping numbers, RFC-4180 quoting, headers."""

from __future__ import annotations

import csv
import io

import pytest

from common.flights.result_csv import QUERY_HEADERS, csv_lines, format_field, format_row


@pytest.mark.parametrize("number", [248.6, 0.1 + 0.2, 1e16, 5e-324, -0.0, 376.20882999999685])
def test_floats_round_trip(number):
    text = format_field(number)
    assert float(text) == number and str(float(text)) == repr(number)


def test_fields():
    assert [format_field(v) for v in ("ATL-BOS", 3, None)] == ["ATL-BOS", "3", ""]
    with pytest.raises(TypeError):
        format_field(True)
    with pytest.raises(TypeError):
        format_field(object())


def test_csv_lines_quote_and_read_back():
    rows = [
        format_row("q1", ('a,"b"', "ATL-BOS", 248.6, "ORD||DEN||LAX")),
        format_row("q1", ("c", "BOS-ATL", 1e16, "x\ny")),
    ]
    lines = csv_lines("q1", rows)
    assert lines[0] == "legId,route,totalFare,stopovers\n"
    assert lines[1] == '"a,""b""",ATL-BOS,248.6,ORD||DEN||LAX\n'
    assert len(lines) == 3 and all(line.endswith("\n") for line in lines)
    read_back = list(csv.reader(io.StringIO("".join(lines))))
    assert read_back == [list(QUERY_HEADERS["q1"]), *rows]


def test_headers_follow_queries_md():
    assert csv_lines("q4", []) == ["route,avgFare,maxFare\n"]
    assert {q: len(h) for q, h in QUERY_HEADERS.items()} == {"q1": 4, "q2": 3, "q3": 4, "q4": 3}
