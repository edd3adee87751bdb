"""Result dedup by (query, row number), completeness, and the follower over a fake consumer."""

import threading

import pytest

from client.results import (
    InconsistentResultsError,
    ResultsFollower,
    ResultsInterruptedError,
    ResultsTimeoutError,
    ResultTable,
)
from common.kaska.errors import ConnectionLostError
from common.kaska.message import Message
from common.session_records import QueryDone, ResultRows, SessionStarted, encode


def test_repeated_slices_and_overlaps_are_dropped_row_by_row():
    table = ResultTable()
    assert table.add_rows(ResultRows("q1", 0, [["a"], ["b"]])) == [["a"], ["b"]]
    assert table.add_rows(ResultRows("q1", 0, [["a"], ["b"]])) == []
    assert table.add_rows(ResultRows("q1", 1, [["B?"], ["c"]])) == [["c"]]
    assert table.duplicate_rows == 3
    assert table.ordered_rows("q1") == [["a"], ["b"], ["c"]]


def test_complete_only_with_every_query_done_and_every_row_present():
    table = ResultTable()
    table.add_rows(ResultRows("q1", 1, [["second"]]))
    assert table.add_done(QueryDone("q1", 2)) is True
    assert not table.is_complete("q1")
    table.add_rows(ResultRows("q1", 0, [["first"]]))
    assert table.is_complete("q1") and not table.complete()
    for query in ("q2", "q3", "q4"):
        table.add_done(QueryDone(query, 0))
    assert table.complete()
    assert table.ordered_rows("q1") == [["first"], ["second"]]


def test_repeated_query_done_is_ignored_and_counted():
    table = ResultTable()
    assert table.add_done(QueryDone("q2", 0, {"bad_fare": 3}))
    assert not table.add_done(QueryDone("q2", 0, {"bad_fare": 3}))
    assert table.duplicate_done == 1 and table.done["q2"].invalid == {"bad_fare": 3}


def test_rows_beyond_the_announced_count_are_inconsistent():
    table = ResultTable()
    table.add_rows(ResultRows("q4", 0, [["a"], ["b"], ["c"]]))
    with pytest.raises(InconsistentResultsError):
        table.add_done(QueryDone("q4", 2))
    other = ResultTable()
    other.add_done(QueryDone("q3", 1))
    with pytest.raises(InconsistentResultsError):
        other.add_rows(ResultRows("q3", 1, [["late"]]))


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
