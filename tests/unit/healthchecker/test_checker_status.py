"""The health checker's read-only status request (healthchecker/status.py, journal.py): the
journal's bounds and heals, the document built from a fake node, and the endpoint refusing
unsigned, forged and stale requests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from common.status_auth import HEADER, StatusAuthError, sign, verify
from healthchecker.journal import KIND_DEATH, KIND_HEALED, KIND_RESTART, EventJournal
from healthchecker.status import StatusEndpoint, status_document
from healthchecker.supervision import Phase, Transition
from tests.unit.metrics_fakes import NOW_S, checker_node

SECRET = b"test-secret"


def journal_with_a_heal() -> EventJournal:
    wall = iter([1000.0, 1001.0, 1002.5, 1002.5])
    journal = EventJournal(events_max=8, wall_clock=lambda: next(wall))
    journal.record_transition(Transition("svc", Phase.UP, Phase.DEAD, "lost"), None)
    journal.record(KIND_RESTART, "svc", "attempt 1: lost")
    journal.record_transition(Transition("svc", Phase.STARTING, Phase.UP, "seen"), 2.5)
    return journal


def test_the_journal_keeps_deaths_restarts_and_the_last_heal():
    journal = journal_with_a_heal()
    assert [(e.at_s, e.kind, e.service) for e in journal.events()] == [
        (1000.0, KIND_DEATH, "svc"), (1001.0, KIND_RESTART, "svc"), (1002.5, KIND_HEALED, "svc")]
    heal = journal.heals()["svc"]
    assert (heal.at_s, heal.heal_s) == (1002.5, 2.5)


def test_the_journal_drops_the_oldest_events_past_its_bound():
    journal = EventJournal(events_max=3, wall_clock=iter(range(10)).__next__)
    for i in range(5):
        journal.record(KIND_RESTART, f"svc-{i}")
    assert [e.service for e in journal.events()] == ["svc-2", "svc-3", "svc-4"]


def status_node() -> SimpleNamespace:
    node = checker_node()  # checker 2 following 3; svc up after one restart
    node.config = SimpleNamespace(node_id=2, name="healthchecker-2")
    node.journal = journal_with_a_heal()
    node.leader_since_s = 990.0
    return node


def test_the_document_holds_role_leader_services_and_events():
    doc = status_document(status_node(), NOW_S, 1010.0)
    assert (doc["node_id"], doc["role"], doc["leader_id"], doc["leader_since_s"]) == (
        2, "follower", 3, 990.0)
    services = {row["name"]: row for row in doc["services"]}
    assert services["svc"]["phase"] == "up" and services["svc"]["restarts"] == 1
    assert services["svc"]["last_seen_age_s"] == pytest.approx(0.2)
    assert (services["svc"]["last_heal_at_s"], services["svc"]["last_heal_s"]) == (1002.5, 2.5)
    assert services["spark-master"]["last_seen_age_s"] is None
    assert [e["kind"] for e in doc["events"]] == [KIND_DEATH, KIND_RESTART, KIND_HEALED]
    json.dumps(doc)  # JSON as it is


def test_a_signature_is_bound_to_secret_path_and_time():
    value = sign(SECRET, "GET", "/status", 1000.0)
    verify(SECRET, "GET", "/status", value, 1010.0)
    for secret, path, now_s in ((b"other", "/status", 1000.0), (SECRET, "/other", 1000.0),
                                (SECRET, "/status", 1031.0)):
        with pytest.raises(StatusAuthError):
            verify(secret, "GET", path, value, now_s)
    with pytest.raises(StatusAuthError, match="no"):
        verify(SECRET, "GET", "/status", None, 1000.0)
    with pytest.raises(StatusAuthError, match="malformed"):
        verify(SECRET, "GET", "/status", "t=1,sig=zz", 1000.0)


def get(port: int, header: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/status",
                                     headers={HEADER: header} if header else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_endpoint_answers_signed_requests_only():
    node = status_node()
    endpoint = StatusEndpoint(("127.0.0.1", 0), SECRET,
                              lambda: status_document(node, NOW_S, time.time())).start()
    try:
        port = endpoint.address[1]
        code, doc = get(port, sign(SECRET, "GET", "/status", time.time()))
        assert code == 200 and doc["name"] == "healthchecker-2"
        for header in (None, sign(b"wrong", "GET", "/status", time.time()),
                       sign(SECRET, "GET", "/status", time.time() - 3600)):
            code, doc = get(port, header)
            assert code == 403 and "error" in doc and "services" not in doc
    finally:
        endpoint.stop()
