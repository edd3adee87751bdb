"""Membership and identity (docs/replication.md) on the real objects: a broker's data directory
knows its cluster and its incarnation, a broker whose directory was wiped rejoins as a learner (no
vote: it may have voted in an epoch it forgot), and frames of another cluster are refused on both
sides."""

from __future__ import annotations

import random
import shutil
import threading
import time
from concurrent.futures import Future

import pytest

from common.kaska.protocol.frames import VERSION, Api
from common.kaska.protocol.produce import ACKS_ALL
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.network.peer_gate import ANSWER, REQUEST, PeerGate, PeerSession
from services.broker.replication.identity import (
    ClusterIdError,
    ClusterIdMismatchError,
    IdentityStore,
    derived_cluster_id,
)
from services.broker.replication.node import (
    REPLICATION_DIR,
    PeerAddress,
    ReplicationConfig,
    ReplicationNode,
)
from services.broker.replication.peer_link import PeerSigner
from services.broker.replication.quorum_store import QuorumState, QuorumStore
from services.broker.replication.wire.peer_auth import (
    AnswerMac,
    ForeignClusterPeerFrameError,
    RequestStamp,
    open_request,
    request_trailer,
)
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.replication_bounds import check_vote_request
from services.broker.replication.wire.vote import VoteRequest, VoteResponse
from services.broker.storage.log import Log
from tests.unit.broker.replication.test_peer_link import link_to, listener  # noqa: F401
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    answer,
    cluster_node,
    elect,
    fetch_everything,
)
from tests.unit.broker.storage.batches import SMALL, batch

SECRET = b"cluster-secret"
NOW_S = 1_700_000_000.0


def _config(node_id: int, **overrides) -> ReplicationConfig:
    peers = tuple(PeerAddress(peer, "127.0.0.1", 1) for peer in (1, 2, 3) if peer != node_id)
    return ReplicationConfig(node_id=node_id, peers=peers, **overrides)


def _restarted_wiped(path, clock: Clock) -> tuple[Log, ReplicationNode]:
    """Broker 3 after `rm -rf` of its data directory: a new directory, nothing else."""
    shutil.rmtree(path)
    log = Log(path, SMALL)
    return log, ReplicationNode(_config(3), log, log.data_dir, clock=clock,
                                rng=random.Random(7))


def _vote(node: ReplicationNode, candidate: int, epoch: int, last_epoch: int, end: int,
          pre_vote: bool = False) -> VoteResponse:
    return node.answer_vote(VoteRequest(candidate, epoch, last_epoch, end, pre_vote))


def test_a_wiped_broker_does_not_vote_twice_in_one_epoch(tmp_path):
    """Broker 3 votes for 1 in epoch 5, loses its directory and restarts. Before learners it
    came back at epoch 0 with no vote and granted 2 a vote in that same epoch 5: two leaders
    could share epoch 5. Now it is a learner and refuses."""
    clock = Clock()
    path = tmp_path / "data3"
    log = Log(path, SMALL)
    node = cluster_node(3, log, clock)
    clock.now_s += 10.0
    assert _vote(node, 1, 5, 0, 0).granted
    node.stop()
    log.close()
    log, node = _restarted_wiped(path, clock)
    try:
        clock.now_s += 10.0
        assert not _vote(node, 2, 5, 0, 0, pre_vote=True).granted
        assert not _vote(node, 2, 5, 0, 0).granted
        assert node.state.voted_for is None
        assert node.state.learner and not node.identity.voter
    finally:
        node.stop()
        log.close()


def test_a_wiped_broker_does_not_elect_a_leader_lacking_an_acknowledged_entry(tmp_path):
    """Leader 1 acknowledges a batch (acks=all) held by itself and broker 3 (broker 2 is
    behind, at the leader's NOOP), then broker 3 loses its directory and leader 1 dies.
    Broker 2 asks 3 for its vote: before learners the empty broker 3 granted it (2's journal
    is longer than nothing), 2 led without the batch, and the acknowledged write was lost.
    Now 3 refuses: no leader until one holding the batch is back."""
    clock = Clock()
    leader_log = Log(tmp_path / "data1", SMALL)
    leader = cluster_node(1, leader_log, clock)
    try:
        elect(leader, clock)
        manager = ReplicaManager(leader, ("127.0.0.1", 9092), leader_log, ack_timeout_s=WAIT_S)
        stop = threading.Event()

        def broker3_keeps_up() -> None:
            while not stop.wait(0.002):
                fetch_everything(leader, follower=3)

        pump = threading.Thread(target=broker3_keeps_up, daemon=True)
        pump.start()
        try:
            manager.create_topic("t", 1)
            # Broker 3's fetches confirm the leader's answers: the lease comes with the second.
            deadline = time.monotonic() + WAIT_S
            while not leader.holds_lease():
                assert time.monotonic() < deadline, "the leader never got its lease"
                time.sleep(0.002)
            manager.partition("t", 0).append(batch(b"acknowledged"), ACKS_ALL)
        finally:
            stop.set()
            pump.join()
        assert leader.state.commit == leader.journal.end == 3  # NOOP, CREATE, the batch
        epoch = leader.state.epoch
    finally:
        leader.stop()
        leader_log.close()
    path = tmp_path / "data3"
    Log(path, SMALL).close()
    log3, broker3 = _restarted_wiped(path, clock)
    try:
        clock.now_s += 10.0
        # Broker 2 holds only the leader's NOOP: (last epoch 1, end 1).
        assert not _vote(broker3, 2, epoch + 1, epoch, 1, pre_vote=True).granted
        assert not _vote(broker3, 2, epoch + 1, epoch, 1).granted
    finally:
        broker3.stop()
        log3.close()


def test_a_data_directory_of_another_cluster_refuses_to_start(tmp_path):
    path = tmp_path / "data"
    with Log(path, SMALL) as log:
        ReplicationNode(_config(1, cluster_id="flights-a"), log, log.data_dir).stop()
    with Log(path, SMALL) as log:
        with pytest.raises(ClusterIdMismatchError) as refused:
            ReplicationNode(_config(1, cluster_id="flights-b"), log, log.data_dir)
        assert (refused.value.stored, refused.value.configured) == ("flights-a", "flights-b")
        node = ReplicationNode(_config(1, cluster_id="flights-a"), log, log.data_dir)
        node.stop()


def test_the_identity_is_kept_and_the_default_cluster_id_is_the_voter_sets():
    assert derived_cluster_id({3, 1, 2}) == derived_cluster_id([1, 2, 3])
    assert derived_cluster_id({1, 2, 3}) != derived_cluster_id({1, 2, 4})
    with pytest.raises(ClusterIdError):
        ReplicationConfig(node_id=1, cluster_id="no spaces")
    with pytest.raises(ClusterIdError):
        ReplicationConfig(node_id=1, cluster_id="x" * 33)


def test_identities_of_new_old_and_lone_directories(tmp_path):
    """A cluster of one votes at once; a directory that held replication state before
    identities existed stays a voter (its votes are in quorum.*); an empty one in a cluster is
    a learner. The incarnation survives a restart; a wiped directory gets a new one."""
    with Log(tmp_path / "alone", SMALL) as log:
        node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir)
        assert node.identity.voter and not node.state.learner
        node.stop()
    with Log(tmp_path / "old", SMALL) as log:
        QuorumStore(log.data_dir / REPLICATION_DIR).save(QuorumState(4, 2))
        node = ReplicationNode(_config(1), log, log.data_dir)
        assert node.identity.voter and not node.state.learner
        node.stop()
    path = tmp_path / "new"
    with Log(path, SMALL) as log:
        node = ReplicationNode(_config(1), log, log.data_dir)
        first = node.identity
        assert not first.voter and node.state.learner
        node.stop()
    with Log(path, SMALL) as log:
        node = ReplicationNode(_config(1), log, log.data_dir)
        assert node.identity == first and node.state.learner
        node.stop()
    shutil.rmtree(path)
    with Log(path, SMALL) as log:
        node = ReplicationNode(_config(1), log, log.data_dir)
        assert node.identity.incarnation != first.incarnation
        node.stop()
    assert IdentityStore(path / REPLICATION_DIR).load() == node.identity


def test_a_learner_is_promoted_and_persists_it(tmp_path):
    """The learner hears from both voters, gets a leader's commit that covers the leader's
    NOOP, catches up: BecomeVoter is written to the identity file before the state that votes,
    and survives a restart."""
    clock = Clock()
    path = tmp_path / "data"
    with Log(path, SMALL) as log:
        node = ReplicationNode(_config(3), log, log.data_dir, clock=clock,
                               rng=random.Random(7))
        assert node.state.learner
        node._absorb_fetch(2, ReplicaFetchResponse(4, 1, 0, FetchOutcome.NOT_LEADER))
        assert node.state.learner and node.state.epoch == 4
        node._absorb_fetch(1, answer(4, 0, [EntryHeader(0, 4, EntryKind.NOOP)], leader=1))
        assert node.state.learner, "the leader's commit does not cover its NOOP yet"
        node._absorb_fetch(1, answer(4, 1, leader=1))
        assert not node.state.learner and node.identity.voter
        assert (node.state.epoch, node.state.voted_for) == (4, 3)
        node.stop()
    with Log(path, SMALL) as log:
        node = ReplicationNode(_config(3), log, log.data_dir, clock=clock)
        assert not node.state.learner and node.state.voted_for == 3
        node.stop()


# -- frames of another cluster --------------------------------------------------------------


def _vote_frame(cluster_id: str, data_incarnation: int = 11) -> bytes:
    body = VoteRequest(2, 1, 0, 0).encode()
    stamp = RequestStamp(2, 1, 7, 1, round(NOW_S * 1000), cluster_id, data_incarnation)
    return body + request_trailer(SECRET, Api.VOTE, VERSION, (body,), stamp)


def test_a_request_of_another_cluster_is_refused_counted_and_logged_once(caplog):
    gate = PeerGate(1, [2, 3], SECRET, wall_clock=lambda: NOW_S, cluster_id="flights-a")

    def open_vote(frame):
        return gate.open_request(Api.VOTE, frame, PeerSession("10.0.0.9"), VoteRequest.decode,
                                 check_vote_request, lambda request: request.candidate)

    with caplog.at_level("DEBUG", logger="services.broker.network.peer_gate"):
        for _ in range(3):
            with pytest.raises(ForeignClusterPeerFrameError):
                open_vote(_vote_frame("flights-b"))
    assert gate.refusals.snapshot() == {(REQUEST, "cluster_mismatch"): 3}
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
    opened = open_vote(_vote_frame("flights-a"))  # the same frame of its own cluster gets in
    assert opened.stamp.data_incarnation == 11 and opened.stamp.cluster_id == "flights-a"


def test_the_cluster_id_is_signed():
    """A frame whose cluster id was rewritten on the way no longer verifies."""
    frame = bytearray(_vote_frame("flights-b"))
    body_end = len(VoteRequest(2, 1, 0, 0).encode())
    cluster_at = body_end + 4 + 4 + 8 + 8 + 8
    frame[cluster_at:cluster_at + 9] = b"flights-a"
    with pytest.raises(Exception) as refused:
        open_request(SECRET, Api.VOTE, VERSION, bytes(frame))
    assert getattr(refused.value, "reason", None) == "unauthenticated"


def test_an_answer_of_another_cluster_is_refused(listener):  # noqa: F811 - the fixture
    signer = PeerSigner(1, SECRET, wall_clock=lambda: NOW_S)
    signer.identify("flights-a", 5, learner=False)
    link = link_to(listener, signer)
    stamp = signer.stamp(2)
    assert stamp.cluster_id == "flights-a" and stamp.data_incarnation == 5
    body = VoteResponse(1, True, -1).encode()
    for cluster_id, refused in (("flights-b", True), ("flights-a", False)):
        mac = AnswerMac(SECRET, Api.VOTE, stamp)
        mac.update(body)
        sent, checked = Future(), Future()
        sent.set_result((0, bytearray(body + mac.trailer(2, cluster_id, 9))))
        link._check_answer(sent, checked, Api.VOTE, stamp)
        if refused:
            assert isinstance(checked.exception(), ForeignClusterPeerFrameError)
        else:
            assert checked.result() == (0, body)
    link.close("test over")
    assert signer.refusals.snapshot() == {(ANSWER, "cluster_mismatch"): 1}
