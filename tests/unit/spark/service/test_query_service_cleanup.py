"""The query service deleting acknowledged sessions' topics, without Spark or a broker: a
ResultsAcked on `sessions` leads to three deletions once the session's job is done and
committed; the cleanup cursor is committed only after them; a restart re-reads acks below it
without redoing jobs; `keep` deletes nothing. Jobs are scripted stand-ins (the loop tests')."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.flights.session_records import ResultsAcked, SessionStarted, encode, session_topics
from common.kaska.errors import ConnectionLostError, UnknownTopicOrPartitionError
from spark.service import session_workers as workers_module
from spark.service.__main__ import parse_args
from spark.service.query_service import QueryService
from spark.service.service_settings import ServiceSettings
from tests.unit.spark.service.test_query_service_loop import (
    WAIT_S,
    FakeSpark,
    MemoryStore,
    ScriptedJobs,
    ended,
    message,
    wait_for_commit,
)

WALL_S = 1_700_000_000.0


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class FakeAdmin:
    """Topics that exist, and every delete asked for; `failures` raise first."""

    def __init__(self, topics=()) -> None:
        self.topics = set(topics)
        self.deletes: list[str] = []
        self.failures: list[Exception] = []

    def delete_topic(self, name: str) -> None:
        self.deletes.append(name)
        if self.failures:
            raise self.failures.pop(0)
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"no topic {name!r}")
        self.topics.remove(name)


def make_service(retention_s: float = 0.0, clock: FakeClock | None = None) -> QueryService:
    settings = ServiceSettings(brokers="h:1", master="local[1]", session_attempts_max=2,
                               session_retry_pause_s=0.001,
                               finished_session_retention_s=retention_s)
    return QueryService(settings, FakeSpark(), clock=clock or FakeClock(),
                        wall_clock=lambda: WALL_S)


@pytest.fixture
def jobs(monkeypatch):
    scripted = ScriptedJobs()
    monkeypatch.setattr(workers_module, "run_session_job", scripted)
    return scripted


@pytest.fixture
def started():
    made: list[QueryService] = []

    def start(service: QueryService, position: int = 0,
              cleanup_position: int | None = None) -> QueryService:
        service.assign_partition(0, position, cleanup_position)
        service.start_workers()
        made.append(service)
        return service

    yield start
    for service in made:
        service.request_stop()
        service.stop_workers()


def ack(offset: int, cid: str, written_at_s: float = 0.0):
    return replace(message(offset, encode(ResultsAcked(cid))),
                   timestamp_ms=int(written_at_s * 1000))


def test_an_ack_deletes_the_sessions_three_topics_once_its_job_is_committed(started, jobs):
    service = started(make_service())
    store, cleanup_store = MemoryStore(), MemoryStore()
    admin = FakeAdmin(session_topics("c1") + session_topics("c2"))
    service.handle(message(0, encode(SessionStarted("c1", 4))))
    service.handle(message(1, encode(ended("c1"))))
    service.handle(ack(2, "c1"))  # before the job is done: e.g. a redo after a crash
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == [] and cleanup_store.saved == [(0, 2)]  # waits at the ack
    jobs.release("c1")
    wait_for_commit(service, store, 3)
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == list(session_topics("c1"))
    assert admin.topics == set(session_topics("c2"))  # nobody else's
    assert cleanup_store.saved[-1] == (0, 3)
    assert (service.counts["sessions_acked"], service.counts["sessions_cleaned"],
            service.counts["session_topics_deleted"]) == (1, 1, 3)
    assert service.counts["records_skipped"] == 1  # the SessionStarted, not the ack


def test_no_deletion_while_the_job_of_that_client_runs(started, jobs):
    service = started(make_service())
    store, cleanup_store = MemoryStore(), MemoryStore()
    admin = FakeAdmin(session_topics("c1"))
    service.handle(message(0, encode(ended("c1"))))
    wait = 0
    while "c1" not in jobs.calls and wait < WAIT_S / 0.05:
        service.absorb_finished(store, wait_s=0.05)
        wait += 1
    # Committed elsewhere already (as after a restart whose checkpoint lies beyond it), but a
    # job for c1 still runs: the ack must wait for it.
    service._committed[0] = 5  # noqa: SLF001 (the committed view the cleanup reads)
    service.handle(ack(1, "c1"))
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == []
    jobs.release("c1")
    wait_for_commit(service, store, 2)
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == list(session_topics("c1"))


def test_topics_already_gone_are_fine_and_not_counted(started, jobs):
    service = started(make_service())
    cleanup_store = MemoryStore()
    admin = FakeAdmin([session_topics("c1")[2]])  # only results.c1 is left
    service.handle(ack(0, "c1"))
    service.handle(ack(1, "c1"))  # a repeated ack: one deletion
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == list(session_topics("c1"))
    assert service.counts["session_topics_deleted"] == 1
    assert cleanup_store.saved == [(0, 2)]


def test_a_failed_deletion_is_retried_and_holds_the_cleanup_cursor(started, jobs):
    clock = FakeClock()
    service = started(make_service(clock=clock))
    cleanup_store = MemoryStore()
    admin = FakeAdmin(session_topics("c1"))
    admin.failures = [ConnectionLostError("broker away")]
    service.handle(ack(0, "c1"))
    service.handle(message(1, encode(SessionStarted("c2", 4))))
    service.clean_up(admin, cleanup_store)
    assert cleanup_store.saved == [] and admin.topics == set(session_topics("c1"))
    service.clean_up(admin, cleanup_store)
    assert len(admin.deletes) == 1  # not before the pause
    clock.now_s += 1.0
    service.clean_up(admin, cleanup_store)
    assert admin.topics == set() and cleanup_store.saved == [(0, 2)]


def test_retention_keeps_the_topics_for_that_long_without_holding_back_jobs(started, jobs):
    clock = FakeClock()
    service = started(make_service(retention_s=60.0, clock=clock))
    store, cleanup_store = MemoryStore(), MemoryStore()
    admin = FakeAdmin(session_topics("c1"))
    service.handle(ack(0, "c1", written_at_s=WALL_S - 20.0))  # written 20 s ago
    service.handle(message(1, encode(SessionStarted("c2", 4))))
    service.absorb_finished(store, wait_s=0.0)
    assert store.saved == [(0, 2)]  # the job cursor does not wait for deletions
    clock.now_s = 39.9
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == [] and cleanup_store.saved == []
    clock.now_s = 40.0
    service.clean_up(admin, cleanup_store)
    assert admin.topics == set() and cleanup_store.saved == [(0, 2)]


def test_a_restart_reads_acks_again_but_redoes_no_job(started, jobs):
    """Killed after the ack at 2 was read, before its deletion: the job cursor is at 3, the
    cleanup cursor still at 1. Records 1 and 2 are read again for the cleanup only."""
    service = started(make_service(), position=3, cleanup_position=1)
    store, cleanup_store = MemoryStore(), MemoryStore()
    admin = FakeAdmin(session_topics("c1"))
    service.handle(message(1, encode(ended("c1"))))
    service.handle(ack(2, "c1"))
    service.handle(message(3, encode(SessionStarted("c2", 4))))
    service.absorb_finished(store, wait_s=0.05)
    service.clean_up(admin, cleanup_store)
    assert jobs.calls == []
    assert admin.topics == set()
    assert store.saved == [(0, 4)] and cleanup_store.saved == [(0, 4)]
    assert service.counts["sessions_picked_up"] == 0


def test_keep_deletes_nothing_and_acks_are_finished_at_once(started, jobs):
    service = started(make_service(retention_s=-1.0))
    store = MemoryStore()
    admin = FakeAdmin(session_topics("c1"))
    service.handle(ack(0, "c1"))
    service.absorb_finished(store, wait_s=0.0)
    service.clean_up(admin, MemoryStore())
    assert admin.deletes == [] and store.saved == [(0, 1)]
    assert service.counts["sessions_acked"] == 1


@pytest.mark.parametrize("payload", [
    encode(ResultsAcked("bad/name")), encode(ResultsAcked("x" * 300)),
    b'{"type":"ResultsAcked","client_id":""}',
])
def test_a_malformed_ack_deletes_nothing(started, jobs, payload):
    service = started(make_service())
    store, cleanup_store = MemoryStore(), MemoryStore()
    admin = FakeAdmin(["airports.bad", "flights.bad", "results.bad"])
    service.handle(message(0, payload))
    service.absorb_finished(store, wait_s=0.0)
    service.clean_up(admin, cleanup_store)
    assert admin.deletes == [] and service.counts["records_malformed"] == 1
    assert store.saved == [(0, 1)] and cleanup_store.saved == [(0, 1)]


def test_retention_flags():
    assert parse_args(["--brokers", "h:1"]).finished_session_retention_s == 0.0
    settings = parse_args(["--brokers", "h:1", "--finished-session-retention-s", "3600"])
    assert settings.finished_session_retention_s == 3600.0 and settings.deletes_finished_sessions
    assert not parse_args(["--brokers", "h:1", "--finished-session-retention-s", "-1"]
                          ).deletes_finished_sessions
    assert not parse_args(["--brokers", "h:1", "--keep-finished-sessions"]
                          ).deletes_finished_sessions
    with pytest.raises(SystemExit):
        parse_args(["--brokers", "h:1", "--finished-session-retention-s", "inf"])
