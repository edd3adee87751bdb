"""The query service's batch mode (`--fold batch`: a job per ended session) end to end: sessions
produced through the client library (generated data with malformed rows, and a real sample),
results equal to the plain-Python reference, exactly once even when the service is killed with
SIGKILL while writing them, and a clean SIGTERM. The streaming fold's faults are
test_fold_faults.py's."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from common.flights.session_records import (
    QUERIES,
    SESSIONS_TOPIC,
    QueryDone,
    ResultRows,
    results_topic,
)
from common.kaska import Admin, Consumer, Producer
from oracle import reference
from oracle.result_compare import assert_all_results
from scripts.bench.queries import ensure_topic, produce_session
from scripts.datagen.generate import generate
from spark.service.query_service import CONSUMER_GROUP
from spark.service.session_job import UNKNOWN_AIRPORT
from tests.integration.broker.broker_process import CLIENT_OPTIONS, BrokerProcess
from tests.integration.spark.service_process import ServiceProcess, topic_records
from tests.real_samples import REAL_SAMPLES_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GENERATED_ROWS = 20_000
INVALID_RATE = 0.02
RESULTS_WAIT_S = 420.0
# Q2's slices (the longest result; the four queries are written at once, each by its own
# producer): beyond the broker's dedup window of 5 batches per producer.
SLICES_BEFORE_KILL = 10
SIGTERM_EXIT_S_MAX = 10.0


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "broker").start()
    yield process
    process.kill()


def wait_until(condition, what: str, service: ServiceProcess, timeout_s: float = RESULTS_WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert service.alive(), f"the service died while waiting for {what}:\n" \
                                f"{service.log_tail()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{service.log_tail()}"
        time.sleep(0.2)


def done_queries(records) -> list[str]:
    return [r.query for r in records if isinstance(r, QueryDone)]


def check_results(records, expected: reference.ReferenceResults) -> None:
    """Exactly once: one QueryDone per query, no slice twice, rows equal the reference."""
    assert Counter(done_queries(records)) == Counter(QUERIES), done_queries(records)
    slices = [(r.query, r.first_row) for r in records if isinstance(r, ResultRows)]
    assert len(slices) == len(set(slices)), "a result slice was stored twice"
    rows = {query: [] for query in QUERIES}
    for record in records:
        if isinstance(record, ResultRows):
            rows[record.query] += [tuple(row) for row in record.rows]
    assert_all_results(rows, expected.by_query())
    for done in (r for r in records if isinstance(r, QueryDone)):
        assert done.rows == len(rows[done.query])
        invalid = dict(expected.invalid_counts)
        if done.query == "q2":
            invalid[UNKNOWN_AIRPORT] = expected.q2_skipped
        assert done.invalid == invalid


def test_killed_mid_write_and_restarted_results_are_exactly_once(tmp_path, broker, services):
    data = generate(tmp_path / "data", GENERATED_ROWS, seed=11, invalid_rate=INVALID_RATE)
    expected = reference.compute_files(data.flights_path, data.airports_path)
    assert all(expected.by_query().values())
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        ensure_topic(admin, SESSIONS_TOPIC, 1)
    with Producer(broker.address, **CLIENT_OPTIONS) as producer:
        producer.send_msg(SESSIONS_TOPIC, b"{this is not a session record")
    first = produce_session(broker.address, data.flights_path, data.airports_path,
                            **CLIENT_OPTIONS)
    topic = results_topic(first.client_id)

    # Slow result writes: the kill lands after some slices and before the last QueryDone.
    service = services("--fold", "batch", "--result-rows-per-slice", "25",
                       "--result-slice-pause-s", "0.1")
    wait_until(lambda: sum(isinstance(r, ResultRows) and r.query == "q2" for r in topic_records(
        broker.address, topic)) >= SLICES_BEFORE_KILL, "q2's result slices", service)
    service.kill9()
    at_kill = topic_records(broker.address, topic)
    assert "q2" not in done_queries(at_kill), "q2 had been written: no mid-write kill"
    assert service.log_lines("skipping malformed record at sessions/0@0")

    # A second session, ended while no service runs: both are answered after the restart.
    second = produce_session(broker.address, REAL_SAMPLES_DIR / "itineraries_1000_a.csv",
                             REAL_SAMPLES_DIR / "airports-codepublic.csv", **CLIENT_OPTIONS)
    restarted = services("--fold", "batch", "--result-rows-per-slice", "25")
    for session in (first, second):
        wait_until(lambda s=session: len(done_queries(topic_records(
            broker.address, results_topic(s.client_id)))) >= len(QUERIES),
            f"QueryDone records of {session.client_id}", restarted)

    check_results(topic_records(broker.address, topic), expected)
    # The redo re-sent slices older than the broker's window, and the broker dropped them.
    (rewrite,) = [line for line in restarted.log_lines("results written")
                  if first.client_id in line]
    assert "(0 batches dropped" not in rewrite, rewrite
    check_results(topic_records(broker.address, results_topic(second.client_id)),
                  reference.compute_files(REAL_SAMPLES_DIR / "itineraries_1000_a.csv",
                                          REAL_SAMPLES_DIR / "airports-codepublic.csv"))
    with Consumer(broker.address, CONSUMER_GROUP, **CLIENT_OPTIONS) as consumer:
        sessions_end = consumer.end_offset(SESSIONS_TOPIC)
        wait_until(lambda: consumer.committed(SESSIONS_TOPIC) == sessions_end,
                   "the commit of every session", restarted, timeout_s=30.0)

    code, seconds = restarted.terminate(SIGTERM_EXIT_S_MAX)
    assert code == 0, restarted.log_tail()
    assert seconds < SIGTERM_EXIT_S_MAX
