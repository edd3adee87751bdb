"""The folding progress of each session (services/status/sessions.py): the pure ledger from given
offsets, and the tracker's reads of the flights offsets against a scripted reader (bounded
ListOffsets a poll, sessions in turns, a failed read keeping the last values)."""

from __future__ import annotations

import pytest

from common.flights.session_records import (
    SESSIONS_TOPIC,
    QueryDone,
    ResultsAcked,
    SessionStarted,
    encode,
    flights_topic,
)
from common.kaska.errors import BrokerUnavailableError, UnknownTopicOrPartitionError
from services.status.sessions import (
    InconsistentOffsetsError,
    SessionLedger,
    SessionTracker,
)


def started(*sessions: tuple[str, int]) -> SessionLedger:
    ledger = SessionLedger(sessions_max=8)
    for client_id, partitions in sessions:
        ledger.apply_session_record(SessionStarted(client_id, partitions))
    return ledger


def test_folded_is_the_sum_of_the_log_starts_stored_of_the_high_watermarks():
    ledger = started(("c1", 3))
    assert ledger.sessions["c1"].backlog_records is None, "not read yet"
    ledger.apply_flights_offsets("c1", [(4, 10), (0, 7), (5, 5)])
    session = ledger.sessions["c1"]
    assert (session.folded_records, session.stored_records, session.backlog_records) == (
        9, 22, 13)
    ledger.apply_flights_offsets("c1", [(10, 10), (7, 9), (5, 6)])
    assert ledger.sessions["c1"].backlog_records == 3


def test_a_session_is_read_until_acknowledged_or_done_with_nothing_held():
    ledger = started(("c1", 2), ("c2", 2), ("c3", 0))
    assert ledger.folding_to_read() == ["c1", "c2"], "c3: no partitions known"
    for query in ("q1", "q2", "q3", "q4"):
        ledger.apply_result_record("c1", QueryDone(query, 1))
    assert ledger.sessions["c1"].done
    assert ledger.folding_to_read() == ["c1", "c2"], "done, its last release not read yet"
    ledger.apply_flights_offsets("c1", [(3, 3), (2, 2)])
    assert ledger.folding_to_read() == ["c2"], "done and all released: nothing will move"
    ledger.apply_flights_offsets("c2", [(1, 3), (0, 2)])
    ledger.apply_session_record(ResultsAcked("c2", {}))
    assert ledger.folding_to_read() == []


def test_an_acknowledged_sessions_topics_may_go_and_its_last_values_stay():
    ledger = started(("c1", 2))
    ledger.apply_flights_offsets("c1", [(5, 8), (6, 6)])
    ledger.apply_session_record(ResultsAcked("c1", {"q1": 1}))
    session = ledger.sessions["c1"]
    assert session.acked and "c1" not in ledger.folding_to_read()
    assert (session.folded_records, session.stored_records, session.backlog_records) == (
        11, 14, 3)


def test_offsets_that_make_no_sense_are_refused_and_change_nothing():
    ledger = started(("c1", 2))
    ledger.apply_flights_offsets("c1", [(1, 2), (0, 0)])
    with pytest.raises(InconsistentOffsetsError):
        ledger.apply_flights_offsets("c1", [(9, 2), (0, 0)])
    assert (ledger.sessions["c1"].folded_records, ledger.sessions["c1"].stored_records) == (1, 2)
    ledger.apply_flights_offsets("forgotten", [(1, 1)])  # ignored
    assert list(ledger.sessions) == ["c1"]


# -- the tracker ---------------------------------------------------------------------------------


class Entry:
    def __init__(self, offset: int, value: bytes) -> None:
        self.offset, self.value = offset, value


class ScriptedReader:
    """A cluster of in-memory topics: the sessions topic's records, and per (topic, partition)
    its (log start, high watermark); a topic in `failing` raises what it maps to. `asked`: the
    flights partitions asked for (the results topics are absent: never created here)."""

    def __init__(self) -> None:
        self.sessions: list[bytes] = []
        self.partition_offsets: dict[tuple[str, int], tuple[int, int]] = {}
        self.failing: dict[str, Exception] = {}
        self.asked: list[tuple[str, int]] = []

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        if topic == SESSIONS_TOPIC:
            return 0, len(self.sessions)
        if topic.startswith("flights."):
            self.asked.append((topic, partition))
        if topic in self.failing:
            raise self.failing[topic]
        if (topic, partition) not in self.partition_offsets:
            raise UnknownTopicOrPartitionError(f"{topic}/{partition}")
        return self.partition_offsets[(topic, partition)]

    def read(self, topic: str, partition: int, start: int, end: int):
        assert topic == SESSIONS_TOPIC, "results topics are absent here"
        return [Entry(offset, self.sessions[offset]) for offset in range(start, end)]

    def close(self) -> None:
        pass


def tracker(reader: ScriptedReader, requests_max: int = 256) -> SessionTracker:
    return SessionTracker("unused:1", None, sessions_max=8, request_timeout_s=1.0,
                          offset_requests_per_poll_max=requests_max, reader=reader)


def start_session(reader: ScriptedReader, client_id: str, offsets: list[tuple[int, int]]):
    reader.sessions.append(encode(SessionStarted(client_id, len(offsets))))
    for partition, pair in enumerate(offsets):
        reader.partition_offsets[(flights_topic(client_id), partition)] = pair


def progress(t: SessionTracker, client_id: str) -> tuple:
    s = t.ledger.sessions[client_id]
    return s.folded_records, s.stored_records, s.backlog_records


def test_the_tracker_reads_each_flights_partition_once_a_poll():
    reader = ScriptedReader()
    start_session(reader, "c1", [(2, 10), (3, 4)])
    t = tracker(reader)
    t.poll()
    assert progress(t, "c1") == (5, 14, 9)
    assert reader.asked == [(flights_topic("c1"), 0), (flights_topic("c1"), 1)]
    reader.partition_offsets[(flights_topic("c1"), 0)] = (10, 12)  # the fold released more
    t.poll()
    assert progress(t, "c1") == (13, 16, 3)
    assert t.offset_requests == 4 and t.offset_errors == 0


def test_a_poll_sends_at_most_its_bound_of_requests_and_the_sessions_take_turns():
    reader = ScriptedReader()
    for client_id in ("a", "b", "c"):
        start_session(reader, client_id, [(1, 2), (1, 2)])
    t = tracker(reader, requests_max=4)
    t.poll()
    assert len(reader.asked) == 4, "two sessions of two partitions"
    assert progress(t, "c") == (None, None, None)
    reader.asked.clear()
    t.poll()
    assert len(reader.asked) == 4 and reader.asked[0][0] == flights_topic("c"), \
        "the one left out goes first"
    assert all(progress(t, cid) == (2, 4, 2) for cid in ("a", "b", "c"))


def test_a_session_over_the_bound_is_never_read_and_counted_the_others_still_are():
    reader = ScriptedReader()
    start_session(reader, "big", [(0, 1)] * 5)
    start_session(reader, "small", [(1, 1)])
    t = tracker(reader, requests_max=4)
    for _ in range(3):
        t.poll()
    assert all(topic == flights_topic("small") for topic, _ in reader.asked)
    assert progress(t, "small") == (1, 1, 0) and progress(t, "big") == (None, None, None)
    assert t.offset_errors == 1, "counted once"


@pytest.mark.parametrize("error", [UnknownTopicOrPartitionError("gone"),
                                   BrokerUnavailableError("outage")])
def test_offsets_that_cannot_be_read_keep_the_last_values(error):
    reader = ScriptedReader()
    start_session(reader, "c1", [(2, 6), (1, 1)])
    t = tracker(reader)
    t.poll()
    assert progress(t, "c1") == (3, 7, 4)
    reader.failing[flights_topic("c1")] = error
    asked_before = len(reader.asked)
    t.poll()
    assert len(reader.asked) > asked_before, "the scenario: it was asked and failed"
    assert progress(t, "c1") == (3, 7, 4) and t.offset_errors == 1


def test_a_partial_read_is_not_applied():
    reader = ScriptedReader()
    start_session(reader, "c1", [(2, 6), (1, 1)])
    t = tracker(reader)
    t.poll()
    reader.partition_offsets[(flights_topic("c1"), 0)] = (6, 6)
    del reader.partition_offsets[(flights_topic("c1"), 1)]  # the second answer fails
    t.poll()
    assert progress(t, "c1") == (3, 7, 4), "both partitions or neither"


def test_an_acknowledged_session_is_not_asked_again():
    reader = ScriptedReader()
    start_session(reader, "c1", [(2, 6)])
    t = tracker(reader)
    t.poll()
    reader.sessions.append(encode(ResultsAcked("c1", {})))
    del reader.partition_offsets[(flights_topic("c1"), 0)]  # the service deleted its topics
    reader.asked.clear()
    t.poll()
    t.poll()
    assert reader.asked == [] and progress(t, "c1") == (2, 6, 4)
