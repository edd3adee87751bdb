"""Result rows streaming to q1.csv ... q4.csv as they arrive: no whole result in memory, the
same bytes as writing each file at once, `.partial` until complete, truncated on a restart."""

import random
import tracemalloc

import pytest

from client.report import ChartData, QueryFiles, Summary, partial_query_file, report_html
from client.results import InconsistentResultsError, ResultTable
from common.flights.result_csv import csv_text
from common.flights.session_records import QUERIES, QueryDone, ResultRows

SLICE_ROWS = 500
MANY_ROWS = 200_000
HELD_BYTES_MAX = 16 * 1024 * 1024  # 200k rows held would take several times this


def q2_rows(first, count):
    return [[f"leg{n:07d}", "ATL-BOS", repr(n * 1.5)] for n in range(first, first + count)]


def slices(query, rows, slice_rows):
    return [ResultRows(query, first, rows[first:first + slice_rows])
            for first in range(0, len(rows), slice_rows)]


def streamed(results_dir, records, rows_ahead_max=100_000):
    """Feed the records to a table writing into `results_dir`; (table, charts)."""
    charts = ChartData()
    with QueryFiles(results_dir) as files:
        table = ResultTable((files, charts), rows_ahead_max=rows_ahead_max)
        for record in records:
            if isinstance(record, ResultRows):
                table.add_rows(record)
            else:
                table.add_done(record)
    return table, charts


def empty_done(*queries):
    return [QueryDone(query, 0) for query in queries]


# Fields csv must quote (commas, quotes, line breaks), non-ASCII text, empty fields.
AWKWARD = {
    "q1": [["leg,1", "ATL-BOS", "1234.5", "DFW||ORD||DEN"], ["lég2", "ATL-LAX", "", "A||B||C"],
           ['le"g3', "ATL-SFO", "1e+20", "X||Y||Z||W"], ["leg\n4", "JFK-LAX", "0.1", "X||Y||Z"]],
    "q2": [["leg3", "JFK-LAX", "12000.25"], ["leg 5", " SEA-MIA", "nan"]],
    "q3": [["leg2", "ATL-LAX", "A||B||C||D", "P1DT2H5M"]],
    "q4": [["ATL-BOS", "512.3333333333334", "900.0"], ["JFK-LAX", "700.5", '7"01']],
}


def shuffled_with_duplicates(rows_by_query, seed):
    """Every row in one-to-three-row slices, in a random order, a third of them twice."""
    rng = random.Random(seed)
    records = []
    for query, rows in rows_by_query.items():
        first = 0
        while first < len(rows):
            size = rng.randint(1, 3)
            records.append(ResultRows(query, first, rows[first:first + size]))
            first += size
        records.append(QueryDone(query, len(rows)))
    records += rng.sample(records, len(records) // 3)
    rng.shuffle(records)
    return records


def test_files_are_the_bytes_of_the_whole_result_written_at_once(tmp_path):
    for seed in range(5):
        results_dir = tmp_path / str(seed)
        table, _ = streamed(results_dir, shuffled_with_duplicates(AWKWARD, seed))
        assert table.complete() and table.rows_held == 0
        for query in QUERIES:
            expected = csv_text(query, AWKWARD[query]).encode()
            assert (results_dir / f"{query}.csv").read_bytes() == expected
        assert sorted(p.name for p in results_dir.iterdir()) == [f"{q}.csv" for q in QUERIES]


def test_many_rows_in_order_are_never_held(tmp_path):
    rows_total = 0
    tracemalloc.start()
    try:
        charts = ChartData()
        with QueryFiles(tmp_path) as files:
            table = ResultTable((files, charts))
            for first in range(0, MANY_ROWS, SLICE_ROWS):
                table.add_rows(ResultRows("q2", first, q2_rows(first, SLICE_ROWS)))
                rows_total += SLICE_ROWS
                assert table.rows_held == 0 and table.next_row["q2"] == rows_total
            table.add_done(QueryDone("q2", MANY_ROWS))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < HELD_BYTES_MAX
    assert table.is_complete("q2") and not partial_query_file(tmp_path, "q2").exists()
    assert (tmp_path / "q2.csv").read_text() == csv_text("q2", q2_rows(0, MANY_ROWS))


def test_rows_ahead_of_a_gap_are_held_only_until_it_fills(tmp_path):
    rows = q2_rows(0, MANY_ROWS)
    records = slices("q2", rows, SLICE_ROWS)
    late_by = 3  # every fourth slice arrives after the three following it
    for start in range(0, len(records) - late_by, late_by + 1):
        records[start:start + late_by + 1] = records[start + 1:start + late_by + 1] + [
            records[start]]
    held_max = 0
    with QueryFiles(tmp_path) as files:
        table = ResultTable([files])
        for record in records:
            table.add_rows(record)
            held_max = max(held_max, table.rows_held)
        assert table.rows_held == 0
        table.add_done(QueryDone("q2", MANY_ROWS))
    assert 0 < held_max <= late_by * SLICE_ROWS
    assert (tmp_path / "q2.csv").read_text() == csv_text("q2", rows)


def test_duplicates_are_counted_and_written_once(tmp_path):
    rows = q2_rows(0, 10)
    records = [ResultRows("q2", 0, rows[:4]), ResultRows("q2", 0, rows[:4]),
               ResultRows("q2", 2, rows[2:7]), QueryDone("q2", 10), ResultRows("q2", 6, rows[6:]),
               ResultRows("q2", 9, rows[9:]), QueryDone("q2", 10)]
    table, _ = streamed(tmp_path, records)
    assert table.duplicate_rows == 4 + 2 + 1 + 1 and table.duplicate_done == 1
    assert (tmp_path / "q2.csv").read_text() == csv_text("q2", rows)


def test_a_gap_filled_later_writes_the_rows_in_order(tmp_path):
    rows = q2_rows(0, 9)
    with QueryFiles(tmp_path) as files:
        table = ResultTable([files])
        assert table.add_rows(ResultRows("q2", 6, rows[6:])) == rows[6:]
        assert table.add_rows(ResultRows("q2", 0, rows[:3])) == rows[:3]
        assert table.add_done(QueryDone("q2", 9))
        assert table.rows_held == 3 and table.next_row["q2"] == 3
        assert not (tmp_path / "q2.csv").exists()
        assert table.add_rows(ResultRows("q2", 2, rows[2:7])) == rows[3:6]  # 2 and 6: repeats
        assert table.rows_held == 0 and table.is_complete("q2")
    assert (tmp_path / "q2.csv").read_text() == csv_text("q2", rows)


def test_a_query_file_appears_only_when_its_query_is_complete(tmp_path):
    rows = q2_rows(0, 4)
    with QueryFiles(tmp_path) as files:
        table = ResultTable([files])
        table.add_done(QueryDone("q2", 4))
        table.add_rows(ResultRows("q2", 0, rows[:3]))
        assert partial_query_file(tmp_path, "q2").exists() and not (tmp_path / "q2.csv").exists()
        table.add_rows(ResultRows("q2", 3, rows[3:]))
        assert not partial_query_file(tmp_path, "q2").exists()
        assert (tmp_path / "q2.csv").read_text() == csv_text("q2", rows)
        assert files.unfinished == ["q1", "q3", "q4"]
    assert partial_query_file(tmp_path, "q1").read_text() == csv_text("q1", [])


def test_a_restarted_client_starts_the_partial_files_afresh(tmp_path):
    rows = q2_rows(0, 1000)
    (tmp_path / "q2.csv").write_text("from an earlier run\n")
    with QueryFiles(tmp_path) as files:  # the first run dies half way
        ResultTable([files]).add_rows(ResultRows("q2", 0, rows[:700]))
    assert partial_query_file(tmp_path, "q2").stat().st_size > 0
    QueryFiles(tmp_path).close()  # the next run starts, and dies before any row
    assert partial_query_file(tmp_path, "q2").read_text() == csv_text("q2", [])
    records = [*slices("q2", rows, 300), QueryDone("q2", 1000), *empty_done("q1", "q3", "q4")]
    table, _ = streamed(tmp_path, records)  # the topic again from offset 0
    assert table.complete() and table.duplicate_rows == 0
    assert (tmp_path / "q2.csv").read_text() == csv_text("q2", rows)
    assert not list(tmp_path.glob("*.partial"))


def test_inconsistent_results_fail_the_stream(tmp_path):
    rows = q2_rows(0, 5)
    cases = [
        [QueryDone("q2", 3), ResultRows("q2", 0, rows)],  # rows past QueryDone.rows
        [ResultRows("q2", 0, rows), QueryDone("q2", 4)],  # QueryDone.rows below rows passed on
        [ResultRows("q2", 4, rows[4:]), QueryDone("q2", 2)],  # ... below a held row
        [ResultRows("q2", -2, rows)],
        [ResultRows("q2", 0, [["leg", "ATL-BOS"]])],
        [ResultRows("q2", 3, [["leg", "ATL-BOS"]])],  # ... ahead of a gap
        [ResultRows("q2", 0, rows[:2]), ResultRows("q2", 1, [rows[1], ["leg", "ATL-BOS"]])],
    ]
    for number, records in enumerate(cases):
        with pytest.raises(InconsistentResultsError):
            streamed(tmp_path / str(number), records)
        assert not (tmp_path / str(number) / "q2.csv").exists()
    with pytest.raises(InconsistentResultsError, match="more than 10 rows arrived ahead"):
        streamed(tmp_path / "ahead", slices("q2", q2_rows(0, 30), 5)[1:], rows_ahead_max=10)


def test_charts_gathered_as_rows_pass_equal_the_charts_of_the_whole_result(tmp_path):
    rng = random.Random(7)
    airports = ["ATL", "BOS", "DEN", "DFW", "JFK", "LAX", "MIA", "ORD", "SEA", "SFO"] * 3
    q1 = [[f"leg{n}", "A-B", "1.0", "||".join(rng.sample(airports, rng.randint(3, 6)))]
          for n in range(3000)]
    q4 = [[f"R{n:03d}-X", repr(rng.uniform(100, 900)), repr(rng.uniform(900, 2000))]
          for n in range(120)]
    whole = {"q1": q1, "q2": [], "q3": [], "q4": q4}
    summary = Summary(client_id="c")
    _, streamed_charts = streamed(tmp_path, shuffled_with_duplicates(whole, 3))
    at_once = ChartData()
    for query, rows in whole.items():
        at_once.add(query, rows)
    assert streamed_charts.q1_rows == 3000 and len(streamed_charts.q4_fares) == 120
    assert report_html(streamed_charts, summary) == report_html(at_once, summary)
