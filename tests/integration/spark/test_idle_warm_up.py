"""The query service's idle warm-up passes with a real Spark and broker: they run while no
session has come, the first session ends them (the pass under way finishes, no new one
starts), that session's results are exact, and a SIGTERM afterwards stops the service cleanly."""

from __future__ import annotations

import re

import pytest

from common.flights.session_records import QUERIES, SESSIONS_TOPIC, results_topic
from common.kaska import Admin
from oracle import reference
from scripts.bench.queries import ensure_topic, produce_session
from tests.integration.broker.broker_process import CLIENT_OPTIONS
from tests.integration.spark.service_process import topic_records
from tests.integration.spark.test_query_service import (
    SIGTERM_EXIT_S_MAX,
    check_results,
    done_queries,
    wait_until,
)
from tests.real_samples import REAL_SAMPLES_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSES = 1000  # more than can run before the session comes: it must end them
PASSES_BEFORE_SESSION = 2  # idle passes seen done before the session starts
PASS_LINE = "warmed up in"
IDLE_END = re.compile(r"idle warm-up: (\d+) of (\d+) passes ran")


def test_a_session_ends_the_idle_passes_and_its_results_stay_exact(broker, services):
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        ensure_topic(admin, SESSIONS_TOPIC, 1)
    # Warm-up passes run the batch job's plan: they are the batch mode's (`--fold batch`).
    service = services("--fold", "batch", "--warm-up-rows", "900", "--warm-up-idle-passes",
                       str(PASSES))
    # The first pass, then idle ones: the session below comes while they run.
    wait_until(lambda: len(service.log_lines(PASS_LINE)) >= 1 + PASSES_BEFORE_SESSION,
               "idle warm-up passes", service)
    assert not service.log_lines("idle warm-up:"), "the passes ended before any session"

    flights = REAL_SAMPLES_DIR / "itineraries_1000_a.csv"
    airports = REAL_SAMPLES_DIR / "airports-codepublic.csv"
    session = produce_session(broker.address, flights, airports, **CLIENT_OPTIONS)
    topic = results_topic(session.client_id)
    wait_until(lambda: len(done_queries(topic_records(broker.address, topic))) >= len(QUERIES),
               "the session's QueryDone records", service)
    check_results(topic_records(broker.address, topic),
                  reference.compute_files(flights, airports))

    # The pass in flight when the session came ends (and logs the end) on its own time, which
    # can be after the session's results.
    wait_until(lambda: service.log_lines("idle warm-up:"), "the idle passes' end line", service)
    (end_line,) = service.log_lines("idle warm-up:")
    ran, of = (int(n) for n in IDLE_END.search(end_line).groups())
    assert of == PASSES and PASSES_BEFORE_SESSION <= ran < PASSES, end_line
    # The first pass and the idle ones that ran, no other: none started after the session.
    assert len(service.log_lines(PASS_LINE)) == 1 + ran, service.log_tail()

    code, seconds = service.terminate(SIGTERM_EXIT_S_MAX)
    assert code == 0, service.log_tail()
    assert seconds < SIGTERM_EXIT_S_MAX
