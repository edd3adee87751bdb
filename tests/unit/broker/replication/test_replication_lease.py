"""The leader lease (docs/replication.md): a leader answers as leader only while it holds its lease,
checked on the clock when it answers. Real ReplicationNode, ReplicaManager, Log and request
handlers; the clock is moved by hand (a SIGSTOP is the clock jumping while no thread runs: the
replication loop is never started here, so no tick notices the pause) and the follower's fetches are
`answer_fetch` calls."""

from __future__ import annotations

import socket
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from common.kaska.errors import (
    NotLeaderError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from common.kaska.protocol.fetch import FetchRequest
from common.kaska.protocol.fetch_committed import FetchCommittedRequest
from common.kaska.protocol.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from common.kaska.protocol.message_length import MessageLengthRequest
from common.kaska.protocol.metadata import NO_LEADER, MetadataRequest, MetadataResponse
from common.kaska.protocol.produce import ACKS_ALL, ProduceRequest
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.cluster.replication_groups import ReplicationGroup, ReplicationGroups
from services.broker.config import BrokerConfig
from services.broker.context import BrokerContext
from services.broker.handlers import (
    fetch,
    fetch_committed,
    list_offsets,
    message_length,
    metadata,
    produce,
)
from services.broker.metrics import BrokerCollector, BrokerCounters
from services.broker.network.body import RequestBody
from services.broker.network.notifier import DataNotifier
from services.broker.network.peer_gate import PeerGate, PeerSession
from services.broker.replication import raft
from services.broker.replication.committed_topics import CommittedTopics
from services.broker.replication.config import ReplicationConfig
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest
from services.broker.storage.log import Log
from tests.unit.broker.replication.test_replication_safety import (
    Clock,
    cluster_node,
    confirm_lease,
    elect,
    follower_keeping_up,
    leader_with_topic,
)
from tests.unit.broker.storage.batches import SMALL, batch
from tests.unit.metrics_fakes import families, sample_values

PAUSE_S = 5.0  # longer than an election: a successor may lead meanwhile
ACKS_ONE = 1


class Handlers:
    """The broker's request handlers over one leader, fed real request bodies."""

    def __init__(self, log, manager: ReplicaManager) -> None:
        self.counters = BrokerCounters()
        manager._counters = self.counters
        groups = ReplicationGroups([ReplicationGroup(
            0, log, manager.node, CommittedTopics(manager.node.journal), manager)])
        self.ctx = BrokerContext.over(
            groups, config=BrokerConfig(data_dir=log.data_dir,
                                        replication=ReplicationConfig(node_id=1),
                                        ack_timeout_s=manager._ack_timeout_s),
            offsets=SimpleNamespace(committed=lambda _group, _topic, _partition: 7),
            notifier=DataNotifier(), metrics=self.counters, peer_gate=PeerGate(1, [2, 3], None))
        self._sockets: list[socket.socket] = []

    def call(self, handler, request):
        payload = request.encode()
        ours, theirs = socket.socketpair()
        self._sockets += [ours, theirs]
        ours.sendall(payload)
        reply = handler.handle(self.ctx, RequestBody(theirs, len(payload)))
        return reply

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def log(tmp_path):
    with Log(tmp_path / "data", SMALL) as store:
        yield store


@pytest.fixture
def leader(log):
    """Broker 1 leads epoch 1 with topic t holding one committed record, and its lease."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    with follower_keeping_up(node):
        manager.partition("t", 0).append(batch(b"committed"))
    confirm_lease(node)
    handlers = Handlers(log, manager)
    try:
        yield SimpleNamespace(node=node, manager=manager, clock=clock, handlers=handlers)
    finally:
        handlers.close()
        node.stop()


def _every_leader_request():
    return [
        (fetch, FetchRequest("t", 0, 0, 1 << 20, 0)),
        (list_offsets, ListOffsetsRequest("t", 0)),
        (message_length, MessageLengthRequest("t", 0, 0)),
        (fetch_committed, FetchCommittedRequest("g", "t", 0)),
        (produce, ProduceRequest("t", 0, ACKS_ONE, batch(b"acks=1"))),
        (produce, ProduceRequest("t", 0, ACKS_ALL, batch(b"acks=all"))),
    ]


def test_leader_with_its_lease_answers_as_leader(leader):
    handlers = leader.handlers
    assert leader.node.holds_lease()
    answer = ListOffsetsResponse.decode(handlers.call(list_offsets,
                                                      ListOffsetsRequest("t", 0)).body)
    assert answer.log_end_offset == 1
    named = MetadataResponse.decode(handlers.call(metadata, MetadataRequest(("t",))).body)
    assert named.topics["t"][0].leader_id == 1
    assert handlers.call(fetch, FetchRequest("t", 0, 0, 1 << 20, 0)).records == 1
    reply = handlers.call(produce, ProduceRequest("t", 0, ACKS_ONE, batch(b"acks=1")))
    reply.wait()  # acks=1: answered at once, still within the lease
    assert handlers.counters.lease_refusals == 0


def test_thawed_leader_refuses_every_leader_request_before_its_loop_runs(leader):
    """SIGSTOP for longer than an election, SIGCONT: the loop thread has not ticked (the
    state still says LEADER of epoch 1), and a request is handled first. Before the fix
    it answered: a stale end offset, records, METADATA naming itself, an acks=1 write its
    successor never gets."""
    journal_end = leader.node.journal.end
    leader.clock.now_s += PAUSE_S
    assert leader.node.state.role is raft.Role.LEADER and leader.node.state.epoch == 1
    handlers = leader.handlers
    for handler, request in _every_leader_request():
        with pytest.raises(NotLeaderError, match="lease expired") as refused:
            handlers.call(handler, request)
        assert refused.value.retriable and refused.value.leader == "", \
            "names no leader: the client asks another broker"
    named = MetadataResponse.decode(handlers.call(metadata, MetadataRequest(("t",))).body)
    assert named.topics["t"][0].leader_id == NO_LEADER, "never names itself"
    assert leader.node.journal.end == journal_end, "no write taken"
    assert handlers.counters.lease_refusals == len(_every_leader_request()) + 1


def test_fetch_past_the_log_end_on_a_leader_without_lease_is_not_leader(leader):
    """A consumer that read on at the successor comes back past this broker's log end: the
    answer is retriable NOT_LEADER, never a non-retriable OffsetOutOfRange."""
    leader.clock.now_s += PAUSE_S
    with pytest.raises(NotLeaderError):
        leader.handlers.call(fetch, FetchRequest("t", 0, 50, 1 << 20, 0))


def test_offsets_past_the_high_watermark_on_the_lease_holder(leader):
    """On the real leader: past the high watermark but in its log is OffsetNotAvailable
    (retriable: just after a failover its commit is catching up); past its log end is a real
    OffsetOutOfRange (nothing committed can be there: the election restriction)."""
    handlers = leader.handlers
    handlers.call(produce, ProduceRequest("t", 0, ACKS_ONE, batch(b"uncommitted"))).wait()
    assert leader.manager.partition("t", 0).high_watermark() == 1
    with pytest.raises(OffsetNotAvailableError) as above:
        handlers.call(fetch, FetchRequest("t", 0, 2, 1 << 20, 0))
    assert above.value.retriable
    with pytest.raises(OffsetOutOfRangeError) as beyond:
        handlers.call(fetch, FetchRequest("t", 0, 3, 1 << 20, 0))
    assert not beyond.value.retriable


def test_acks_one_is_refused_at_answer_time_when_the_lease_ran_out_meanwhile(leader):
    """Accepted with the lease, paused before the answer: a thawed leader never says an
    acks=1 write succeeded (its successor may never get it); the retry goes elsewhere."""
    reply = leader.handlers.call(produce, ProduceRequest("t", 0, ACKS_ONE, batch(b"late")))
    leader.clock.now_s += PAUSE_S
    with pytest.raises(NotLeaderError):
        reply.wait()


def test_fetch_long_poll_that_outlives_the_lease_answers_not_leader(leader, monkeypatch):
    handlers = leader.handlers

    def paused_while_waiting(_topic, _partition, _predicate, _timeout_s):
        leader.clock.now_s += PAUSE_S

    monkeypatch.setattr(handlers.ctx.notifier, "wait_until", paused_while_waiting)
    with pytest.raises(NotLeaderError):
        handlers.call(fetch, FetchRequest("t", 0, 1, 1 << 20, 500))


def test_lease_is_regained_once_a_majority_confirms_again(leader):
    leader.clock.now_s += PAUSE_S
    assert not leader.node.holds_lease()
    confirm_lease(leader.node)
    answer = ListOffsetsResponse.decode(leader.handlers.call(
        list_offsets, ListOffsetsRequest("t", 0)).body)
    assert answer.log_end_offset == 1


def test_a_fetch_on_another_connection_confirms_nothing(log):
    """The follower drops its connection after any failed fetch: only the next fetch on the
    connection that carried the answer proves the answer was read."""
    clock = Clock()
    node, _manager = leader_with_topic(log, clock)
    try:
        clock.now_s += PAUSE_S
        assert not node.holds_lease()

        def fetch_on(session: PeerSession) -> None:
            node.answer_fetch(ReplicaFetchRequest(2, 1, node.journal.end, 1, 1 << 20, 0),
                              session=session)

        fetch_on(PeerSession("127.0.0.1"))
        fetch_on(PeerSession("127.0.0.1"))
        assert not node.holds_lease(), "two connections, one fetch each: nothing confirmed"
        session = PeerSession("127.0.0.1")
        fetch_on(session)
        fetch_on(session)
        assert node.holds_lease()
        assert dict(node.state.heard_s)[2] == clock.now_s
    finally:
        node.stop()


def test_follower_drops_the_connection_after_an_error_answer(log):
    """An error answer (no entries read, no contact with the leader): the next fetch goes on a
    new connection, so it cannot tell the leader an answer was read."""
    node = cluster_node(2, log, Clock())
    closed = []
    node._peer_requests.connections[1] = SimpleNamespace(close=closed.append, alive=True)
    future: Future = Future()
    future.set_result((6, b""))
    try:
        assert node._peer_requests.result(1, future, object) is None
        assert 1 not in node._peer_requests.connections and len(closed) == 1
    finally:
        node.stop()


def test_lease_metric_families(leader):
    registry = CollectorRegistry(auto_describe=False)
    ctx = leader.handlers.ctx
    registry.register(BrokerCollector(leader.handlers.counters, ctx.partitions,
                                      ctx.replication, clock=leader.clock))
    assert sample_values(families(registry)["kaska_replication_lease_held"]) == {
        ("kaska_replication_lease_held", (("group", "0"),)): 1}
    leader.clock.now_s += PAUSE_S
    with pytest.raises(NotLeaderError):
        leader.handlers.call(list_offsets, ListOffsetsRequest("t", 0))
    found = families(registry)
    assert sample_values(found["kaska_replication_lease_held"]) == {
        ("kaska_replication_lease_held", (("group", "0"),)): 0}
    assert sample_values(found["kaska_leader_lease_refusals"]) == {
        ("kaska_leader_lease_refusals_total", ()): 1}


def test_elect_helper_leaves_no_lease_until_confirmed(log):
    """A fresh leader: its NOOP is not committed and nobody confirmed it."""
    clock = Clock()
    node = cluster_node(1, log, clock)
    try:
        elect(node, clock)
        assert not node.holds_lease()
    finally:
        node.stop()
