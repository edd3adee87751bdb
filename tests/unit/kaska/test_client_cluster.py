"""The shared retry loop: backoff, leader hints, and 'duplicate after a lost answer' = success."""

import pytest

from common.address import parse_host_port
from common.kaska import cluster as cluster_module
from common.kaska.cluster import Cluster, parse_brokers
from common.kaska.errors import (
    ConnectionLostError,
    DuplicateSequenceError,
    LeaderMovedError,
    NotLeaderError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from common.kaska.producer import producer_id_bytes
from common.kaska.protocol.metadata import BrokerInfo, MetadataResponse, PartitionInfo
from common.kaska.retry import RetryPolicy


class ScriptedConnection:
    """Answers each request with the next scripted outcome (an exception or a value)."""

    def __init__(self, outcomes, log, address):
        self._outcomes = outcomes
        self._log = log
        self.address = address
        self.alive = True

    def request(self, request, timeout_s=None, watch=None):
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
    cluster.leaders.follow_hint(("t", 0), "h1:1", parse_host_port)
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


class SilentOrAnswering:
    """A broker that is frozen (consults the request's watch until it gives up, or raises
    RequestTimedOutError after `looks_max` looks), or answers by request type."""

    def __init__(self, address, log, frozen, answers, looks_max=50):
        self.address = address
        self._log = log
        self._frozen = frozen
        self._answers = answers
        self._looks_max = looks_max
        self.alive = True

    def request(self, request, timeout_s=None, watch=None):
        self._log.append((self.address, type(request).__name__))
        if self.address in self._frozen:
            for _ in range(self._looks_max if watch is not None else 0):
                verdict = watch.still_worth_waiting()
                if verdict is not None:
                    raise LeaderMovedError(verdict)
            raise RequestTimedOutError("no answer")
        return self._answers[type(request).__name__](self.address)

    def close(self, reason=""):
        self.alive = False


def _metadata_naming(leader_id, epoch):
    brokers = (BrokerInfo(1, "h1", 1), BrokerInfo(2, "h2", 2), BrokerInfo(3, "h3", 3))
    return lambda address: MetadataResponse(brokers, {"t": (PartitionInfo(0, leader_id, epoch),)})


@pytest.fixture
def frozen_cluster(monkeypatch):
    log, frozen, answers = [], set(), {}
    monkeypatch.setattr(
        cluster_module, "BrokerConnection",
        lambda address, **kw: SilentOrAnswering(address, log, frozen, answers))
    monkeypatch.setattr(cluster_module.time, "sleep", lambda s: None)
    return log, frozen, answers


def test_a_request_at_a_frozen_leader_moves_to_the_successor_another_broker_names(
        frozen_cluster):
    log, frozen, answers = frozen_cluster
    cluster = Cluster("h1:1,h2:2,h3:3", retry=RetryPolicy(3, 0.001, 0.002))
    answers["MetadataRequest"] = _metadata_naming(1, 4)
    answers["str"] = lambda address: f"ok from {address[0]}"
    assert cluster.call("req", route=("t", 0)) == "ok from h1"
    frozen.add(("h1", 1))
    answers["MetadataRequest"] = _metadata_naming(3, 5)  # h2 and h3 elected h3
    assert cluster.call("req", route=("t", 0)) == "ok from h3"
    assert log[-3:] == [(("h1", 1), "str"), (("h2", 2), "MetadataRequest"), (("h3", 3), "str")]
    # The ex-leader's hint-less return is refused until a newer epoch names it.
    assert cluster.leaders.leader(("t", 0)) == ("h3", 3)


def test_a_frozen_leader_named_by_everyone_is_waited_for_until_the_timeout(frozen_cluster):
    log, frozen, answers = frozen_cluster
    cluster = Cluster("h1:1,h2:2", retry=RetryPolicy(0, 0.001, 0.002))
    answers["MetadataRequest"] = _metadata_naming(1, 4)  # nobody elected anyone else
    cluster.leaders.absorb("t", _metadata_naming(1, 4)(None))
    frozen.add(("h1", 1))
    with pytest.raises(RequestTimedOutError) as info:
        cluster.call("req", route=("t", 0))
    assert info.value.maybe_delivered
    assert sum(1 for _, kind in log if kind == "MetadataRequest") == 50


def test_metadata_skips_a_frozen_broker_first_in_the_bootstrap_list(frozen_cluster):
    log, frozen, answers = frozen_cluster
    cluster = Cluster("h1:1,h2:2,h3:3", retry=RetryPolicy(0, 0.001, 0.002))
    frozen.add(("h1", 1))
    answers["MetadataRequest"] = _metadata_naming(2, 3)
    answers["str"] = lambda address: f"ok from {address[0]}"
    assert cluster.call("req", route=("t", 0)) == "ok from h2"
    assert log == [(("h1", 1), "MetadataRequest"), (("h2", 2), "MetadataRequest"),
                   (("h2", 2), "str")]


def test_a_topic_missing_from_a_lagging_brokers_metadata_is_asked_again(scripted):
    """METADATA answers from a broker's committed view, a round trip behind a create: the
    partition count is asked again until the topic appears."""
    outcomes, log = scripted
    brokers = (BrokerInfo(1, "h1", 1),)
    outcomes += [MetadataResponse(brokers, {}), MetadataResponse(brokers, {}),
                 MetadataResponse(brokers, {"t": (PartitionInfo(0, 1, 1),
                                                  PartitionInfo(1, 1, 1))})]
    assert _cluster().partition_count("t") == 2
    assert len(log) == 3


def test_a_topic_that_never_appears_is_unknown_after_the_wait(scripted, monkeypatch):
    outcomes, log = scripted
    monkeypatch.setattr(cluster_module, "TOPIC_APPEAR_WAIT_S", 0.0)
    outcomes += [MetadataResponse((BrokerInfo(1, "h1", 1),), {})] * 3
    with pytest.raises(UnknownTopicOrPartitionError):
        _cluster().partition_count("gone")
    assert len(log) == 1, "no wait left: asked once, then unknown"
