"""Result dedup by (query, row number), ordering into the sinks, completeness, and the
follower over a fake consumer."""

import threading

import pytest

from client.results import (
    InconsistentResultsError,
    ResultsFollower,
    ResultsInterruptedError,
    ResultsTimeoutError,
    ResultTable,
)
from common.flights.session_records import QueryDone, ResultRows, SessionStarted, encode
from common.kaska.errors import ConnectionLostError
from common.kaska.message import Message


class MemorySink:
    """Keeps what a table passes on: the rows per query in the order given, and the finishes."""

    def __init__(self):
        self.rows = {}
        self.finished = []

    def add(self, query, rows):
        self.rows.setdefault(query, []).extend(rows)

    def finish(self, query):
        self.finished.append(query)


def q1(*legs):
    return [[leg, "A-B", "1.0", "X||Y||Z"] for leg in legs]


def test_repeated_slices_and_overlaps_are_dropped_row_by_row():
    sink = MemorySink()
    table = ResultTable([sink])
    assert table.add_rows(ResultRows("q1", 0, q1("a", "b"))) == q1("a", "b")
    assert table.add_rows(ResultRows("q1", 0, q1("a", "b"))) == []
    assert table.add_rows(ResultRows("q1", 1, q1("B?", "c"))) == q1("c")
    assert table.duplicate_rows == 3
    assert sink.rows["q1"] == q1("a", "b", "c") and table.next_row["q1"] == 3


def test_complete_only_with_every_query_done_and_every_row_present():
    sink = MemorySink()
    table = ResultTable([sink])
    assert table.add_rows(ResultRows("q1", 1, q1("second"))) == q1("second")
    assert sink.rows == {} and table.rows_held == 1  # waits for row 0
    assert table.add_done(QueryDone("q1", 2)) is True
    assert not table.is_complete("q1") and sink.finished == []
    table.add_rows(ResultRows("q1", 0, q1("first")))
    assert table.is_complete("q1") and not table.complete()
    assert sink.finished == ["q1"] and table.rows_held == 0
    for query in ("q2", "q3", "q4"):
        table.add_done(QueryDone(query, 0))
    assert table.complete() and sink.finished == ["q1", "q2", "q3", "q4"]
    assert sink.rows["q1"] == q1("first", "second")


def test_repeated_query_done_is_ignored_and_counted():
    sink = MemorySink()
    table = ResultTable([sink])
    assert table.add_done(QueryDone("q2", 0, {"bad_fare": 3}))
    assert not table.add_done(QueryDone("q2", 0, {"bad_fare": 3}))
    assert table.duplicate_done == 1 and table.done["q2"].invalid == {"bad_fare": 3}
    assert sink.finished == ["q2"]  # once


def test_rows_beyond_the_announced_count_are_inconsistent():
    table = ResultTable()
    table.add_rows(ResultRows("q4", 0, [["a", "1", "2"], ["b", "1", "2"], ["c", "1", "2"]]))
    with pytest.raises(InconsistentResultsError, match="q4 row 2 outside the announced 2"):
        table.add_done(QueryDone("q4", 2))
    other = ResultTable()
    other.add_done(QueryDone("q3", 1))
    with pytest.raises(InconsistentResultsError, match="q3 row 1 outside"):
        other.add_rows(ResultRows("q3", 1, [["late", "A-B", "X", "PT1H"]]))


def test_a_held_row_beyond_the_announced_count_is_inconsistent():
    table = ResultTable()
    table.add_rows(ResultRows("q1", 5, q1("ahead")))
    with pytest.raises(InconsistentResultsError, match="q1 row 5 outside the announced 3"):
        table.add_done(QueryDone("q1", 3))


def test_negative_row_numbers_and_wrong_field_counts_are_inconsistent():
    with pytest.raises(InconsistentResultsError, match="negative"):
        ResultTable().add_rows(ResultRows("q2", -1, [["a", "A-B", "1"]]))
    with pytest.raises(InconsistentResultsError, match="q2 row 1 has 2 fields"):
        ResultTable().add_rows(ResultRows("q2", 0, [["a", "A-B", "1"], ["b", "A-B"]]))


def test_rows_far_ahead_of_a_gap_are_bounded():
    table = ResultTable(rows_ahead_max=3)
    table.add_rows(ResultRows("q1", 1, q1("b", "c", "d")))
    assert table.rows_held == 3
    with pytest.raises(InconsistentResultsError, match="more than 3 rows arrived ahead of row 0"):
        table.add_rows(ResultRows("q1", 4, q1("e")))


class FakeConsumer:
    """Serves a list of payloads from offset 0; fails once at `fail_at` if given."""

    def __init__(self, payloads, fail_at=None):
        self.payloads = payloads
        self.position = None
        self.fail_at = fail_at

    def seek(self, topic, offset, partition=0):
        self.topic, self.position = topic, offset

    def poll(self, timeout_s=0.0):
        if self.position == self.fail_at:
            self.fail_at = None
            raise ConnectionLostError("broker went away")
        if self.position >= len(self.payloads):
            return None
        offset = self.position
        self.position += 1
        return Message(self.topic, 0, offset, self.payloads[offset], b"\0" * 16, offset, 0)


def follower(payloads, stop=None, timeout_s=5.0, clock=None, fail_at=None):
    shown, done = [], []
    kwargs = {} if clock is None else {"clock": clock}
    result = ResultsFollower(FakeConsumer(payloads, fail_at), "cid", stop or threading.Event(),
                             lambda q, rows: shown.append((q, rows)), done.append,
                             results_timeout_s=timeout_s, **kwargs)
    return result, shown, done


def full_session_payloads():
    return [encode(ResultRows("q1", 0, [["L1", "A-B", "1.0", "X||Y||Z"]])),
            b"not json",
            encode(SessionStarted("cid", 4)),  # not a result record: skipped
            encode(ResultRows("q1", 0, [["L1", "A-B", "1.0", "X||Y||Z"]])),
            encode(QueryDone("q1", 1)),
            encode(QueryDone("q2", 0)), encode(QueryDone("q3", 0)),
            encode(ResultRows("q4", 0, [["A-B", "2.5", "3.0"]])),
            encode(QueryDone("q4", 1, {"bad_fare": 1})),
            encode(QueryDone("q4", 1, {"bad_fare": 1}))]


def test_follower_reads_from_the_start_and_stops_when_complete():
    reader, shown, done = follower(full_session_payloads(), fail_at=4)
    table = reader.follow()
    assert table.complete()
    assert shown == [("q1", [["L1", "A-B", "1.0", "X||Y||Z"]]), ("q4", [["A-B", "2.5", "3.0"]])]
    assert [d.query for d in done] == ["q1", "q2", "q3", "q4"]
    assert reader.stats.malformed_records == 2 and table.duplicate_rows == 1
    assert reader.consumer.position == 9  # the repeated QueryDone after completion is unread


def test_follower_times_out_with_what_is_missing():
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    reader, _, _ = follower([encode(QueryDone("q1", 0))], timeout_s=10, clock=clock)
    with pytest.raises(ResultsTimeoutError, match="q1: 0/0 rows, q2: 0/\\? rows"):
        reader.follow()


def test_follower_stops_on_request():
    stop = threading.Event()
    stop.set()
    reader, _, _ = follower([], stop=stop)
    with pytest.raises(ResultsInterruptedError):
        reader.follow()
