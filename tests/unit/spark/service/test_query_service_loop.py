"""The query service's bookkeeping without Spark or a broker: which `sessions` records become
jobs, what gets committed when, retries and giving up, stops. Jobs are scripted stand-ins."""

from __future__ import annotations

import threading

import pytest
from pyspark.errors import PythonException

from common.flights.session_records import SessionEnded, SessionStarted, encode
from common.kaska import Message
from common.kaska.errors import ConnectionLostError
from spark.service import session_workers as workers_module
from spark.service.__main__ import parse_args
from spark.service.progress_store import FileProgressStore
from spark.service.query_service import QueryService
from spark.service.result_writer import ResultWriteInterruptedError
from spark.service.service_settings import ServiceSettings
from spark.service.session_job import JobReport

WAIT_S = 10.0


def ended(cid: str, flights_ends=(3, 2), airports_ends=(1, 1)) -> SessionEnded:
    return SessionEnded(cid, {f"flights.{cid}": list(flights_ends),
                              f"airports.{cid}": list(airports_ends)})


def message(offset: int, payload: bytes, partition: int = 0) -> Message:
    return Message("sessions", partition, offset, payload, bytes(16), offset, 0)


class MemoryStore:
    def __init__(self) -> None:
        self.saved: list[tuple[int, int]] = []

    def load(self, partition: int) -> int | None:
        return None

    def save(self, partition: int, offset: int) -> None:
        self.saved.append((partition, offset))


class ScriptedJobs:
    """Replaces `run_session_job`: each client's job waits for its release, then raises the
    scripted errors in turn, then succeeds."""

    def __init__(self) -> None:
        self.releases: dict[str, threading.Event] = {}
        self.errors: dict[str, list[BaseException]] = {}
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def release(self, cid: str) -> None:
        self._event(cid).set()

    def _event(self, cid: str) -> threading.Event:
        with self.lock:
            return self.releases.setdefault(cid, threading.Event())

    def __call__(self, spark, session, settings, pool, stop) -> JobReport:
        with self.lock:
            self.calls.append(session.client_id)
        assert self._event(session.client_id).wait(WAIT_S), "job never released"
        errors = self.errors.get(session.client_id, [])
        if errors:
            raise errors.pop(0)
        return JobReport(session.client_id, rows=1)


class FakeContext:
    def cancelAllJobs(self) -> None:  # noqa: N802 (Spark's name)
        pass


class FakeSpark:
    sparkContext = FakeContext()  # noqa: N815 (Spark's name)


@pytest.fixture
def jobs(monkeypatch):
    scripted = ScriptedJobs()
    monkeypatch.setattr(workers_module, "run_session_job", scripted)
    return scripted


@pytest.fixture
def service():
    settings = ServiceSettings(brokers="h:1", master="local[1]", session_attempts_max=3,
                               session_retry_pause_s=0.001)
    made = QueryService(settings, FakeSpark())
    made.assign_partition(0, 0)
    made.start_workers()
    yield made
    made.request_stop()
    made.stop_workers()


def wait_for_commit(service: QueryService, store: MemoryStore, offset: int) -> None:
    for _ in range(int(WAIT_S / 0.05)):
        service.absorb_finished(store, wait_s=0.05)
        if store.saved and store.saved[-1] == (0, offset):
            return
    raise AssertionError(f"never committed {offset}: {store.saved}")


def test_other_and_malformed_records_are_skipped_and_committed(service, jobs):
    store = MemoryStore()
    service.handle(message(0, encode(SessionStarted("c0", 4))))
    service.handle(message(1, b"{not json"))
    service.handle(message(2, b"[" * 100_000))
    service.handle(message(3, encode(ended("c0", flights_ends=()))))  # no end offsets
    service.handle(message(4, encode(ended("bad/name"))))
    service.absorb_finished(store, wait_s=0.0)
    assert store.saved == [(0, 5)]
    assert service.counts["records_skipped"] == 1 and service.counts["records_malformed"] == 4
    assert jobs.calls == []


def test_commits_wait_for_the_oldest_session_to_finish(service, jobs):
    store = MemoryStore()
    service.handle(message(0, encode(ended("c1"))))
    service.handle(message(1, encode(ended("c2"))))
    jobs.release("c2")
    service.handle(message(2, encode(SessionStarted("c3", 4))))
    for _ in range(int(WAIT_S / 0.05)):
        service.absorb_finished(store, wait_s=0.05)
        if service.counts["sessions_done"] == 1:
            break
    service.absorb_finished(store, wait_s=0.05)
    assert service.counts["sessions_done"] == 1
    assert store.saved == []  # c1 (offset 0) still running: nothing may be committed
    jobs.release("c1")
    wait_for_commit(service, store, 3)
    assert sorted(jobs.calls) == ["c1", "c2"] and service.counts["sessions_done"] == 2


def test_failed_jobs_are_retried_then_given_up(service, jobs):
    store = MemoryStore()
    jobs.errors["c1"] = [ConnectionLostError("broker away")]
    jobs.errors["c2"] = [ConnectionLostError("still away")] * 3
    jobs.release("c1")
    jobs.release("c2")
    service.handle(message(0, encode(ended("c1"))))
    service.handle(message(1, encode(ended("c2"))))
    wait_for_commit(service, store, 2)
    assert jobs.calls.count("c1") == 2 and jobs.calls.count("c2") == 3
    assert (service.counts["sessions_done"], service.counts["sessions_given_up"]) == (1, 1)


def test_a_malformed_payload_is_given_up_at_once_and_counted(service, jobs):
    """A worker's MalformedRowsPayloadError reaches the driver as a PythonException's text;
    retrying would decode the same bytes again."""
    store = MemoryStore()
    jobs.errors["c1"] = [PythonException(
        "An exception was thrown from the Python worker.\nTraceback ...\n"
        "common.flights.arrow_rows.RowsPayloadTooLargeError: rows payload decodes to more than "
        "67108864 bytes")]
    jobs.release("c1")
    service.handle(message(0, encode(ended("c1"))))
    wait_for_commit(service, store, 1)
    assert jobs.calls.count("c1") == 1, "not retried"
    assert (service.counts["sessions_given_up"],
            service.counts["sessions_malformed_payload"]) == (1, 1)


def test_an_interrupted_session_is_never_committed(service, jobs):
    store = MemoryStore()
    jobs.errors["c1"] = [ResultWriteInterruptedError("stopping")]
    jobs.release("c1")
    service.handle(message(0, encode(ended("c1"))))
    service.handle(message(1, encode(SessionStarted("c9", 4))))
    for _ in range(5):
        service.absorb_finished(store, wait_s=0.05)
    assert store.saved == [] and jobs.calls == ["c1"]


def test_file_progress_store_survives_a_restart(tmp_path):
    store = FileProgressStore(tmp_path)
    assert store.load(0) is None
    store.save(0, 7)
    store.save(1, 3)
    again = FileProgressStore(tmp_path)
    assert (again.load(0), again.load(1)) == (7, 3)


def test_command_line_bounds():
    settings = parse_args(["--brokers", "h:1,h:2", "--sessions-concurrent-max", "3",
                           "--sessions-pending-max", "1", "--heartbeat-targets", "a:1,b:2"])
    assert settings.brokers == "h:1,h:2" and settings.heartbeat_targets == (("a", 1), ("b", 2))
    assert settings.sessions_pending_max == 3  # never below the concurrency
    with pytest.raises(SystemExit):
        parse_args(["--brokers", "h:1", "--result-rows-per-slice", "0"])


def test_until_the_broker_answers_retries_retriable_errors_and_raises_others_as_they_came():
    from common.kaska.errors import ConnectionLostError, UnknownTopicOrPartitionError
    from spark.service.query_service import ServiceStopping

    settings = ServiceSettings(brokers="h:1", master="local[1]")
    made = QueryService(settings, FakeSpark())
    answers = iter([ConnectionLostError("away"), ConnectionLostError("still away"), 42])

    def call():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert made._until_broker_answers(call) == 42
    refused = UnknownTopicOrPartitionError("no such topic")
    refused.retriable = False
    with pytest.raises(UnknownTopicOrPartitionError):
        made._until_broker_answers(lambda: (_ for _ in ()).throw(refused))
    made.stop_requested.set()
    with pytest.raises(ServiceStopping):
        made._until_broker_answers(lambda: (_ for _ in ()).throw(ConnectionLostError("gone")))


@pytest.mark.parametrize("first", ["started", "ended"])
def test_a_session_seen_ends_the_idle_warm_up_whatever_record_comes_first(service, jobs,
                                                                          first):
    """The idle warm-up's rule (driver.warm_up_while_idle): it yields at a session's start,
    an upload included, not only at its job; a malformed record is no session."""
    service.handle(message(0, b"{not json"))
    assert not service.has_seen_sessions()
    record = SessionStarted("c5", 4) if first == "started" else ended("c5")
    service.handle(message(1, encode(record)))
    assert service.has_seen_sessions()
    jobs.release("c5")
