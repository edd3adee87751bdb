"""Journal compaction (docs/replication.md, "Compaction") on the real ReplicationNode,
ReplicaManager, Journal and Log objects: a leader compacts its journal past a follower that is down
(keeping what a follower lagging within the bound needs), answers it SNAPSHOT, and the follower --
an empty one, as a broker with a wiped data directory -- installs the snapshot, copying the
partition bytes with SNAPSHOT_FETCH, and fetches on from its end. The network is played by hand, as
in test_replication_safety.py."""

from __future__ import annotations

import os
import random
from concurrent.futures import Future

import pytest

from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication import raft
from services.broker.replication.node import PeerAddress, ReplicationConfig, ReplicationNode
from services.broker.replication.snapshot import partition_ends
from services.broker.replication.wire.replica_fetch import FetchOutcome, ReplicaFetchRequest
from services.broker.replication.wire.snapshot_fetch import (
    NO_TOPIC_ID,
    SnapshotFetchOutcome,
    SnapshotFetchRequest,
)
from services.broker.storage.log import Log
from tests.unit.broker.replication.founding import founding_voter
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    confirm_lease,
    elect,
    fetch_everything,
    follower_keeping_up,
)
from tests.unit.broker.storage.batches import SMALL, batch, new_producer_id

ENTRIES_MAX = 6


def node_of(node_id: int, log: Log, clock: Clock) -> ReplicationNode:
    peers = tuple(PeerAddress(peer, "127.0.0.1", 1) for peer in (1, 2, 3) if peer != node_id)
    config = ReplicationConfig(node_id=node_id, peers=peers, journal_entries_max=ENTRIES_MAX)
    founding_voter(log.data_dir, config)
    return ReplicationNode(config, log, log.data_dir, clock=clock, rng=random.Random(7))


@pytest.fixture
def logs(tmp_path):
    with Log(tmp_path / "leader", SMALL) as leader, Log(tmp_path / "follower", SMALL) as other:
        yield leader, other


def wire_to(follower: ReplicationNode, leader: ReplicationNode) -> list[SnapshotFetchRequest]:
    """The follower's SNAPSHOT_FETCH requests reach `leader` (answer bytes read from the
    slices, as sendfile would send them); returns the requests seen."""
    seen: list[SnapshotFetchRequest] = []

    def send(_peer, request):
        seen.append(request)
        response, slices = leader.answer_snapshot_fetch(request)
        data = b"".join(os.pread(piece.fd, piece.nbytes, piece.position) for piece in slices)
        future: Future = Future()
        future.set_result((0, response.encode_prefix() + data))
        return future

    follower._peer_requests.send = send
    return seen


def produce(manager: ReplicaManager, topic: str, partition: int, *values: bytes) -> None:
    confirm_lease(manager.node)
    manager.partition(topic, partition).append(batch(*values, producer_id=new_producer_id(),
                                                     sequence=0))


def test_leader_compacts_past_a_down_follower_which_installs_the_snapshot(logs):
    leader_log, follower_log = logs
    clock = Clock()
    leader = node_of(1, leader_log, clock)
    elect(leader, clock)
    manager = ReplicaManager(leader, ("127.0.0.1", 9092), leader_log, ack_timeout_s=WAIT_S)
    follower = None
    try:
        with follower_keeping_up(leader):  # broker 2 keeps up; broker 3 is down
            manager.create_topic("t", 2)
            manager.create_topic("gone", 1)
            for k in range(8):
                produce(manager, "t", k % 2, b"v%d" % k)
            produce(manager, "gone", 0, b"x")
            manager.delete_topic("gone", lambda _name: None)
            for k in range(4):  # the delete is folded into the snapshot, not left to the tail
                produce(manager, "t", 0, b"after%d" % k)
        fetch_everything(leader)
        end = leader.journal.end
        assert leader.state.commit == end and leader._commits.applied == end
        leader._maybe_compact()
        # Broker 3 matched nothing: the leader keeps half the bound for such a laggard, no more.
        assert leader.journal.start == end - ENTRIES_MAX // 2 and leader.counters.compactions
        start = leader.journal.start
        assert leader.entry_committed(3, 1), "a compacted entry is still known committed"
        # Broker 3, back with an empty data directory, is answered SNAPSHOT.
        response, entries = leader.answer_fetch(ReplicaFetchRequest(3, leader.state.epoch, 0,
                                                                    0, 1 << 20, 0))
        assert response.outcome is FetchOutcome.SNAPSHOT and not entries
        assert response.snapshot == leader.journal.snapshot and response.snapshot.end == start
        assert [topic.name for topic in response.snapshot.topics] == ["t"]

        follower = node_of(3, follower_log, clock)
        seen = wire_to(follower, leader)
        follower._absorb_fetch(1, response, 0)
        assert follower.counters.snapshots_installed == 1
        assert (follower.journal.start, follower.journal.end) == (start, start)
        assert follower.state.commit == start and follower.state.leader_id == 1
        assert {request.topic for request in seen} >= {"t"}
        ends = partition_ends(response.snapshot)
        for partition in (0, 1):
            copied = follower_log.partition("t", partition)
            assert copied.log_end_offset == ends[("t", partition)]
            assert copied.read_bytes(0, 10**6) == leader_log.partition("t", partition).read_bytes(
                0, 10**6, upto_offset=ends[("t", partition)]), "byte for byte"
            assert follower.high_watermark("t", partition) == ends[("t", partition)]
        assert "gone" not in follower_log.topics()
        # From the snapshot's end on, entries again: broker 3 catches up the tail.
        request = ReplicaFetchRequest(3, leader.state.epoch, start, follower.journal.last_epoch,
                                      1 << 20, 0)
        response, entries = leader.answer_fetch(request)
        assert response.outcome is FetchOutcome.ENTRIES and entries[0].index == start
        assert follower.journal.epochs() == leader.journal.epochs()[:len(
            follower.journal.epochs())]
    finally:
        leader.stop()
        if follower is not None:
            follower.stop()


def test_snapshot_fetch_refuses_another_incarnation_and_a_non_leader(logs):
    leader_log, _ = logs
    clock = Clock()
    leader = node_of(1, leader_log, clock)
    elect(leader, clock)
    manager = ReplicaManager(leader, ("127.0.0.1", 9092), leader_log, ack_timeout_s=WAIT_S)
    try:
        with follower_keeping_up(leader):
            manager.create_topic("t", 1)
            produce(manager, "t", 0, b"a")
        topic_id = leader.journal.incarnation("t")
        epoch = leader.state.epoch
        ok = leader.answer_snapshot_fetch(SnapshotFetchRequest(
            3, epoch, "t", topic_id.epoch, topic_id.index, 0, 0, 1, 1 << 20))
        assert ok[0].outcome is SnapshotFetchOutcome.DATA and ok[1]
        for request in (SnapshotFetchRequest(3, epoch, "t", topic_id.epoch, topic_id.index + 5,
                                              0, 0, 1, 1 << 20),
                        SnapshotFetchRequest(3, epoch, "t", NO_TOPIC_ID, NO_TOPIC_ID, 0, 0, 1,
                                             1 << 20),
                        SnapshotFetchRequest(3, epoch, "t", topic_id.epoch, topic_id.index, 4,
                                             0, 1, 1 << 20)):
            assert leader.answer_snapshot_fetch(request)[0].outcome is SnapshotFetchOutcome.GONE
        assert leader.answer_snapshot_fetch(SnapshotFetchRequest(
            3, epoch + 1, "t", topic_id.epoch, topic_id.index, 0, 0, 1, 1 << 20))[0].outcome \
            is SnapshotFetchOutcome.NOT_LEADER
        # From offset 1 (the high watermark) on there is nothing committed to send.
        short = leader.answer_snapshot_fetch(SnapshotFetchRequest(
            3, epoch, "t", topic_id.epoch, topic_id.index, 0, 1, 99, 1 << 20))
        assert short[0].outcome is SnapshotFetchOutcome.DATA and not short[1]
        assert leader.state.role is raft.Role.LEADER
    finally:
        leader.stop()
