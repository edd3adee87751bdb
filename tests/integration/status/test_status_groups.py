"""The status page's replication groups against three real brokers (three groups, a topic in
each): healthy while every broker is in sync; a SIGKILLed broker leaves every group
under-replicated on the page, with the partitions counted, until it is restarted and caught
up. A session's folding progress follows its flights topic's log starts (moved by
DeleteRecords, as the query service does) and keeps its last values once its topics are gone.
The poller and page are the real ones, in-process; the brokers' /metrics are real."""

from __future__ import annotations

import signal
import time

import pytest
from starlette.testclient import TestClient

from common.flights.session_records import (
    SESSIONS_TOPIC,
    ResultsAcked,
    SessionStarted,
    encode,
    flights_topic,
    results_topic,
    session_topics,
)
from common.kaska import Admin, Producer
from scripts.launcher.ports import free_ports
from services.broker.replication.in_sync import REPLICA_LAG_TIME_MAX_S
from services.status.app import create_app
from services.status.config import StatusConfig
from services.status.poller import Poller
from tests.integration.replication.cluster import FAST_ELECTIONS, BrokerCluster
from tests.integration.replication.workload import CLIENT_TIMEOUTS, RIDE_OUT_RETRY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = 3
PARTITIONS = 6
WAIT_S = REPLICA_LAG_TIME_MAX_S + 60
POLL_S = 0.2
CID = "f01d0000-0000-4000-8000-000000000001"


@pytest.fixture
def cluster(tmp_path):
    cluster = BrokerCluster(tmp_path / "status-groups", size=3, groups=GROUPS,
                            extra_args=FAST_ELECTIONS).start()
    yield cluster
    cluster.close()


@pytest.fixture
def poller(cluster):
    (nobody,) = free_ports(1)  # no health checker runs: the page says it did not answer
    config = StatusConfig(
        brokers=cluster.bootstrap,
        broker_metrics=tuple(("127.0.0.1", cluster.metrics_ports[i]) for i in cluster.ids),
        checkers=(("127.0.0.1", nobody),), secret=b"not-used", request_timeout_s=2.0)
    poller = Poller(config)
    yield poller
    poller.stop()


def wait_for_document(poller: Poller, what: str, condition) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        doc = poller.poll_once()
        if condition(doc["brokers"]):
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT_S:g} s; last: {doc['brokers']}")
        time.sleep(POLL_S)


def states(brokers: dict) -> list[str]:
    return [group["state"] for group in brokers["groups"]]


def test_a_killed_broker_leaves_every_group_under_replicated_until_it_is_back(cluster, poller):
    cluster.create_topic(SESSIONS_TOPIC, 1)  # what the poller reads sessions from: empty
    cluster.create_topic("status-groups", PARTITIONS)
    healthy = wait_for_document(poller, "every group healthy", lambda b: (
        states(b) == ["healthy"] * GROUPS))
    assert healthy["brokers"]["under_replicated_partitions"] == 0
    assert [g["in_sync"] for g in healthy["brokers"]["groups"]] == [3] * GROUPS

    victim = cluster.ids[-1]
    assert cluster.kill(victim, signal.SIGKILL) == -signal.SIGKILL
    at_risk = wait_for_document(poller, f"broker {victim}'s groups under-replicated", lambda b: (
        states(b) == ["under-replicated"] * GROUPS
        and all(g["leader"] != f"broker-{victim}" for g in b["groups"])))
    brokers = at_risk["brokers"]
    assert not {b["name"]: b for b in brokers["brokers"]}[f"broker-{victim}"]["reachable"], \
        "the scenario: the victim is gone"
    assert [(g["in_sync"], g["voters"], g["majority"]) for g in brokers["groups"]] == \
        [(2, 3, 2)] * GROUPS
    # Every partition of the topic (and the internal ones of group 0) is under-replicated.
    assert brokers["under_replicated_partitions"] >= PARTITIONS
    assert brokers["groups_without_healthy_majority"] == []
    html = TestClient(create_app(lambda: at_risk)).get("/").text
    assert 'data-group="1" data-state="under-replicated"' in html
    assert f"under-replicated partitions: <b>{brokers['under_replicated_partitions']}</b>" \
        in html

    cluster.start_broker(victim)
    back = wait_for_document(poller, "every group healthy again", lambda b: (
        states(b) == ["healthy"] * GROUPS))
    assert back["brokers"]["under_replicated_partitions"] == 0


def wait_for_session(poller: Poller, what: str, condition) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        doc = poller.poll_once()
        session = next((s for s in doc["sessions"] if s["client_id"] == CID), None)
        if session is not None and condition(session):
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT_S:g} s; last: {session}")
        time.sleep(POLL_S)


def folding(doc: dict) -> tuple:
    session = next(s for s in doc["sessions"] if s["client_id"] == CID)
    return session["folded_records"], session["stored_records"], session["backlog_records"]


def test_a_sessions_folding_progress_follows_its_log_starts_and_stays_once_its_topics_go(
        cluster, poller):
    for topic, partitions in ((SESSIONS_TOPIC, 1), (flights_topic(CID), 2),
                              (results_topic(CID), 1)):
        cluster.create_topic(topic, partitions)
    with Producer(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as producer, \
            Admin(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as admin:
        for partition, batches in ((0, 6), (1, 4)):
            for n in range(batches):
                producer.send_batch(flights_topic(CID), partition, [b"row %d" % n])
        producer.send_msg(SESSIONS_TOPIC, encode(SessionStarted(CID, 2)))
        stored = wait_for_session(poller, "10 batches stored, none folded", lambda s: (
            s["stored_records"] == 10))
        assert folding(stored) == (0, 10, 10)

        assert admin.delete_records(flights_topic(CID), {0: 4, 1: 1}) == {0: 4, 1: 1}
        folded = wait_for_session(poller, "5 batches folded", lambda s: (
            s["folded_records"] == 5))
        assert folding(folded) == (5, 10, 5)
        html = TestClient(create_app(lambda: folded)).get("/").text
        row = html.split(f'data-client="{CID}"')[1].split("</tr>")[0]
        assert "5 / 10 batches" in row and "(backlog 5)" in row

        producer.send_msg(SESSIONS_TOPIC, encode(ResultsAcked(CID, {})))
        for topic in session_topics(CID):
            if topic in admin.topics():
                admin.delete_topic(topic)
        gone = wait_for_session(poller, "the session acknowledged", lambda s: s["done"])
        assert not set(session_topics(CID)) & set(admin.topics()), "the scenario: topics gone"
        assert folding(gone) == (5, 10, 5)
        assert folding(poller.poll_once()) == (5, 10, 5), "the last values stay"
