"""spark/service/acks_ahead.py: the acknowledgements read at start, and the query service skipping
the job of a session its client acknowledged before the start (no Spark, no broker)."""

from __future__ import annotations

import pytest

from common.flights.session_records import ResultsAcked, SessionStarted, encode
from common.kaska.errors import ConnectionLostError, OffsetOutOfRangeError
from common.kaska.range_reader import RangeRecord
from spark.service import session_workers as workers_module
from spark.service.acks_ahead import AcksAhead, acks_in, read_acks_ahead
from tests.unit.spark.service.test_query_service_cleanup import ack, make_service
from tests.unit.spark.service.test_query_service_loop import (
    MemoryStore,
    ScriptedJobs,
    ended,
    message,
    wait_for_commit,
)


def test_acks_in_keeps_each_clients_last_ack_and_skips_everything_else():
    records = [(3, encode(SessionStarted("c1", 4))), (4, encode(ended("c1"))),
               (5, encode(ResultsAcked("c1"))), (6, b"{not json"), (7, b"[" * 100_000),
               (8, encode(ResultsAcked("c2"))), (9, encode(ResultsAcked("c1")))]
    assert acks_in(records) == {"c1": 9, "c2": 8}


def test_only_a_session_ended_below_its_clients_ack_counts_as_acknowledged():
    ahead = AcksAhead()
    ahead.add(0, 10, "c1")
    assert ahead.acknowledged_later(0, 4, "c1")
    assert not ahead.acknowledged_later(0, 11, "c1")  # a later session under the same id
    assert not ahead.acknowledged_later(1, 4, "c1")  # another partition
    assert not ahead.acknowledged_later(0, 4, "c2")


class FakeReader:
    def __init__(self, by_partition, failing=()) -> None:
        self.by_partition = by_partition
        self.failing = dict(failing)
        self.asked: list[tuple[int, int, int]] = []

    def read(self, topic, partition, start, end):
        self.asked.append((partition, start, end))
        if partition in self.failing:
            raise self.failing[partition]
        for offset, value in self.by_partition[partition]:
            if start <= offset < end:
                yield RangeRecord(offset, value, header=None)


def test_read_acks_ahead_reads_each_range_and_survives_a_partition_it_cannot_read(caplog):
    reader = FakeReader({0: [(1, encode(ended("c1"))), (2, encode(ResultsAcked("c1"))),
                             (7, encode(ResultsAcked("c3")))]},
                        failing={1: OffsetOutOfRangeError("deleted by retention")})
    ahead = read_acks_ahead(reader, {0: (1, 5), 1: (0, 9)})
    assert reader.asked == [(0, 1, 5), (1, 0, 9)]
    assert ahead.acked_at == {0: {"c1": 2}}  # c3's ack lies beyond the end at start
    assert "could not read [0, 9)" in caplog.text


def test_read_acks_ahead_gives_up_on_a_broken_reader_mid_range():
    class Broken(FakeReader):
        def read(self, topic, partition, start, end):
            yield RangeRecord(0, encode(ResultsAcked("c1")), header=None)
            raise ConnectionLostError("gone")

    assert read_acks_ahead(Broken({}), {0: (0, 5)}).acked_at == {}


@pytest.fixture
def jobs(monkeypatch):
    scripted = ScriptedJobs()
    monkeypatch.setattr(workers_module, "run_session_job", scripted)
    return scripted


def test_a_session_acknowledged_before_the_start_is_not_redone(jobs):
    service = make_service()
    store = MemoryStore()
    service.assign_partition(0, 1)
    ahead = AcksAhead()
    ahead.add(0, 3, "c1")
    service.note_acks_ahead(ahead)
    service.start_workers()
    try:
        service.handle(message(1, encode(ended("c1"))))  # acknowledged at 3: no job
        service.handle(message(2, encode(ended("c2"))))  # not acknowledged: its job runs
        service.handle(ack(3, "c1"))
        service.handle(message(4, encode(ended("c1"))))  # above the ack: a job again
        jobs.release("c2")
        jobs.release("c1")
        wait_for_commit(service, store, 5)
    finally:
        service.request_stop()
        service.stop_workers()
    assert sorted(jobs.calls) == ["c1", "c2"]  # c2's, and c1's from offset 4 only
    assert service.counts["sessions_acked_before_start"] == 1
    assert service.counts["sessions_picked_up"] == 2
