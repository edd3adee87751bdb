"""The client's acknowledgement of its saved results (ResultsAcked on `sessions`), against a
real broker and the fake query service:

- a completed session acks once, and its checkpoint says results saved and acked;
- a client resumed after its ack, its topics deleted meanwhile (as the query service does),
  completes at once from the files on disk: it neither waits nor makes the topics again;
- a client that died between saving its results and acking acks on resume, once;
- a resumed client whose result files were removed fails with a clear error instead of waiting.
"""

from __future__ import annotations

import io
import threading
import uuid
from pathlib import Path

import pytest

from client.progress import make_progress
from client.report import read_summary
from client.resume import SessionCheckpoint
from client.runner import ClientConfig, run_session
from client.session import SessionControl
from common.flights.session_records import SESSIONS_TOPIC, ResultsAcked, decode, session_topics
from common.kaska import Admin, Consumer
from scripts.datagen.generate import generate
from tests.integration.broker.broker_process import BrokerProcess
from tests.integration.client.fake_query_service import FakeQueryService

pytestmark = pytest.mark.integration

ROWS = 2_000
RESUMED_RUN_S_MAX = 10.0


class Killed(BaseException):
    """The process dies here (nothing in the client catches a BaseException)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    report = generate(tmp_path_factory.mktemp("data"), rows=ROWS, seed=5, invalid_rate=0.02)
    return report.flights_path, report.airports_path


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def service(broker):
    fake = FakeQueryService(broker.address, rows_per_slice=50, duplicates=False).start()
    yield fake
    fake.stop()


def config(broker, data, results_dir: Path, client_id: str) -> ClientConfig:
    flights, airports = data
    return ClientConfig(flights=flights, airports=airports, brokers=broker.address,
                        results_dir=results_dir, client_id=client_id, partitions=2,
                        results_timeout_s=60.0, stall_timeout_s=20.0)


def run(broker, data, results_dir: Path, client_id: str):
    return run_session(config(broker, data, results_dir, client_id), threading.Event(),
                       make_progress(io.StringIO()))


def acks_of(broker, client_id: str) -> int:
    count = 0
    with Consumer(broker.address, group="t") as consumer:
        consumer.seek(SESSIONS_TOPIC, 0, 0)
        end = consumer.end_offset(SESSIONS_TOPIC, 0)
        while consumer.position(SESSIONS_TOPIC, 0) < end:
            record = decode(consumer.poll(5.0).value)
            count += isinstance(record, ResultsAcked) and record.client_id == client_id
    return count


def state_of(results_dir: Path, client_id: str) -> dict:
    return SessionCheckpoint(results_dir / "state", client_id).store.load_json()


def result_files(results_dir: Path) -> dict[str, str]:
    return {q: (results_dir / f"{q}.csv").read_text() for q in ("q1", "q2", "q3", "q4")}


def delete_session_topics(broker, client_id: str) -> None:
    with Admin(broker.address) as admin:
        for topic in session_topics(client_id):
            admin.delete_topic(topic)


def remaining_topics(broker, client_id: str) -> set[str]:
    with Admin(broker.address) as admin:
        return set(admin.topics()) & set(session_topics(client_id))


def test_completed_session_acks_once_and_a_resume_after_deletion_needs_no_topic(
        broker, service, data, tmp_path):
    client_id = str(uuid.uuid4())
    results_dir = tmp_path / "r"
    first = run(broker, data, results_dir, client_id)
    assert first.status == "completed" and first.results_acked, first.error
    state = state_of(results_dir, client_id)
    assert (state["results_saved"], state["results_acked"]) == (True, True)
    assert read_summary(results_dir)["results_acked"] is True
    assert acks_of(broker, client_id) == 1
    files = result_files(results_dir)
    rows_per_query = first.rows_per_query
    assert sum(rows_per_query.values()) > 0

    delete_session_topics(broker, client_id)  # what the query service does on the ack
    resumed = run(broker, data, results_dir, client_id)
    assert resumed.status == "completed" and resumed.resumed, resumed.error
    assert resumed.timings_s["total"] < RESUMED_RUN_S_MAX
    assert resumed.rows_per_query == rows_per_query  # kept from the earlier summary
    assert read_summary(results_dir)["rows_per_query"] == rows_per_query
    assert result_files(results_dir) == files
    assert remaining_topics(broker, client_id) == set()  # not made again
    assert acks_of(broker, client_id) == 1


def test_a_client_killed_between_saving_and_acking_acks_on_resume(broker, service, data,
                                                                   tmp_path, monkeypatch):
    client_id = str(uuid.uuid4())
    results_dir = tmp_path / "r"

    def die(self, rows_per_query) -> None:
        raise Killed()

    with monkeypatch.context() as patched:
        patched.setattr(SessionControl, "write_acked", die)
        with pytest.raises(Killed):
            run(broker, data, results_dir, client_id)
    state = state_of(results_dir, client_id)
    assert (state["results_saved"], state["results_acked"]) == (True, False)
    assert acks_of(broker, client_id) == 0
    assert remaining_topics(broker, client_id) == set(session_topics(client_id))
    files = result_files(results_dir)

    resumed = run(broker, data, results_dir, client_id)
    assert resumed.status == "completed" and resumed.results_acked, resumed.error
    assert acks_of(broker, client_id) == 1
    assert state_of(results_dir, client_id)["results_acked"] is True
    assert result_files(results_dir) == files

    again = run(broker, data, results_dir, client_id)  # acked already: nothing is re-sent
    assert again.status == "completed" and again.results_acked
    assert acks_of(broker, client_id) == 1


def test_saved_results_that_went_missing_fail_the_resume_instead_of_waiting(
        broker, service, data, tmp_path):
    client_id = str(uuid.uuid4())
    results_dir = tmp_path / "r"
    assert run(broker, data, results_dir, client_id).status == "completed"
    delete_session_topics(broker, client_id)
    (results_dir / "q3.csv").unlink()
    resumed = run(broker, data, results_dir, client_id)
    assert resumed.status == "failed"
    assert "SavedResultsMissingError" in resumed.error and "q3" in resumed.error
    assert remaining_topics(broker, client_id) == set()
