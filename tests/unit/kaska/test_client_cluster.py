"""The shared retry loop: backoff, leader hints, and 'duplicate after a lost answer' = success."""

import pytest

from common.kaska import cluster as cluster_module
from common.kaska.cluster import Cluster, parse_brokers
from common.kaska.errors import (
    ConnectionLostError,
    DuplicateSequenceError,
    NotLeaderError,
    OutOfOrderSequenceError,
    UnknownTopicOrPartitionError,
)
from common.kaska.producer import producer_id_bytes
from common.kaska.retry import RetryPolicy


class ScriptedConnection:
    """Answers each request with the next scripted outcome (an exception or a value)."""

    def __init__(self, outcomes, log, address):
        self._outcomes = outcomes
        self._log = log
        self.address = address
        self.alive = True

    def request(self, request, timeout_s=None):
        self._log.append((self.address, request))
        outcome = self._outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def close(self, reason=""):
        self.alive = False


@pytest.fixture
def scripted(monkeypatch):
    outcomes, log = [], []
    monkeypatch.setattr(cluster_module, "BrokerConnection",
                        lambda address, **kw: ScriptedConnection(outcomes, log, address))
    monkeypatch.setattr(cluster_module.time, "sleep", lambda s: None)
    return outcomes, log


def _cluster(retries_max=3):
    return Cluster("h1:1,h2:2", retry=RetryPolicy(retries_max, 0.001, 0.002))


def test_retriable_errors_are_retried_then_succeed(scripted):
    outcomes, log = scripted
    outcomes += [ConnectionLostError("x"), UnknownTopicOrPartitionError("y"), "ok"]
    assert _cluster().call("req") == "ok"
    assert len(log) == 3


def test_retries_are_bounded_and_the_last_error_says_it_may_have_been_delivered(scripted):
    outcomes, _ = scripted
    outcomes += [ConnectionLostError("x")] * 4
    with pytest.raises(ConnectionLostError) as info:
        _cluster(retries_max=3).call("req")
    assert info.value.maybe_delivered


def test_non_retriable_error_is_raised_at_once(scripted):
    outcomes, log = scripted
    outcomes += [OutOfOrderSequenceError("gap"), "never"]
    with pytest.raises(OutOfOrderSequenceError):
        _cluster().call("req")
    assert len(log) == 1


def test_duplicate_after_a_lost_answer_is_success(scripted):
    outcomes, _ = scripted
    outcomes += [ConnectionLostError("answer lost"), DuplicateSequenceError("old")]
    assert _cluster().call("req", ok_after_delivery=(DuplicateSequenceError,)) is None


def test_duplicate_on_a_first_attempt_is_an_error(scripted):
    outcomes, _ = scripted
    outcomes += [DuplicateSequenceError("old")]
    with pytest.raises(DuplicateSequenceError):
        _cluster().call("req", ok_after_delivery=(DuplicateSequenceError,))


def test_no_retry_hands_back_a_retriable_error_at_once(scripted):
    outcomes, log = scripted
    outcomes += [UnknownTopicOrPartitionError("none"), "never"]
    with pytest.raises(UnknownTopicOrPartitionError):
        _cluster().call("req", no_retry=(UnknownTopicOrPartitionError,))
    assert len(log) == 1


def test_not_leader_hint_is_followed(scripted, monkeypatch):
    outcomes, log = scripted
    cluster = _cluster()
    cluster._leaders[("t", 0)] = ("h1", 1)
    hinted = NotLeaderError("moved")
    hinted.leader = "h2:2"
    outcomes += [hinted, "ok"]
    assert cluster.call("req", route=("t", 0)) == "ok"
    assert [address for address, _ in log] == [("h1", 1), ("h2", 2)]


def test_broker_list_parsing():
    assert parse_brokers("a:1, b:2") == [("a", 1), ("b", 2)]
    for bad in ("", "a", "a:b", ":1"):
        with pytest.raises(ValueError):
            parse_brokers(bad)


def test_backoff_grows_and_stays_under_its_ceiling():
    policy = RetryPolicy(10, 0.1, 1.0)
    assert policy.backoff_s(0) <= 0.1
    assert all(policy.backoff_s(a) <= 1.0 for a in range(20))
    assert policy.backoff_s(5) >= 0.5  # ceiling 1.0, jitter keeps at least half


def test_producer_id_forms():
    raw = bytes(range(16))
    import uuid

    assert producer_id_bytes(raw) == raw
    assert producer_id_bytes(uuid.UUID(bytes=raw)) == raw
    assert producer_id_bytes(str(uuid.UUID(bytes=raw))) == raw
    assert len(producer_id_bytes(None)) == 16
    with pytest.raises(ValueError):
        producer_id_bytes(b"short")
