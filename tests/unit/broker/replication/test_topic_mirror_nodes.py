"""The topic mirror (topic_mirror.py) on the real TopicMirror, ReplicationNode, ReplicaManager,
Journal and Log objects of two brokers, each running the metadata group (group 0) and one data
group (group 1). The network is played by hand, as in test_replication_safety.py: a follower's
fetch is the leader's `answer_fetch`, its answer fed to the follower's `_absorb_fetch`; a third
broker only ever fetches (`fetch_everything`) or votes. The clock is moved by hand.

The scenario: the data group's leader on broker 1 closes a topic the metadata group deleted;
then the data group's leadership moves to broker 2, whose copy of the metadata group has the
delete but has not heard yet that it is committed -- a follower one fetch behind, or a broker
just restarted with a commit index persisted a while ago. Its stale copy still shows the
closed incarnation live. The mirror there must not open it again (a produce into it would be
acknowledged, then discarded once its copy catches up): the group's watermark, carried by
the close, holds it back until its copy reaches the close's metadata prefix.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from common.kaska.errors import UnknownTopicOrPartitionError
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication import raft
from services.broker.replication.committed_topics import CommittedTopics
from services.broker.replication.node import PeerAddress, ReplicationConfig, ReplicationNode
from services.broker.replication.topic_mirror import CloseTopic, OpenTopic, TopicMirror
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    ReplicaFetchRequest,
)
from services.broker.storage.log import Log
from tests.unit.broker.replication.founding import founding_voter
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    confirm_lease,
    fetch_everything,
)
from tests.unit.broker.storage.batches import SMALL, batch, new_producer_id

BROKERS = (1, 2, 3)
DATA_GROUP = 1
JOURNAL_ENTRIES_MAX = 2  # small, so that a compaction folds the close


def holds_every_topic(_topic: str, _partitions: int) -> bool:
    return True


class Broker:
    """The metadata group's and the data group's node, manager and committed topics of one
    broker, and the data group's TopicMirror (not started: `round_once` is called by hand)."""

    def __init__(self, node_id: int, tmp_path, clock: Clock) -> None:
        self.node_id = node_id
        self.logs = [Log(tmp_path / f"b{node_id}-g{group}", SMALL) for group in (0, DATA_GROUP)]
        self.nodes = [_node(node_id, group, log, clock)
                      for group, log in zip((0, DATA_GROUP), self.logs, strict=True)]
        self.topics = [CommittedTopics(node.journal) for node in self.nodes]
        self.managers = [ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S,
                                        topics=topics)
                         for node, log, topics in zip(self.nodes, self.logs, self.topics,
                                                      strict=True)]
        self.mirror = TopicMirror(DATA_GROUP, self.nodes[0], self.topics[0], self.nodes[1],
                                  self.topics[1], self.managers[1], holds_every_topic)

    @property
    def metadata(self) -> ReplicationNode:
        return self.nodes[0]

    @property
    def data(self) -> ReplicationNode:
        return self.nodes[1]

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        for log in self.logs:
            log.close()


def _node(node_id: int, group: int, log: Log, clock: Clock) -> ReplicationNode:
    peers = tuple(PeerAddress(peer, "127.0.0.1", 1) for peer in BROKERS if peer != node_id)
    config = ReplicationConfig(node_id=node_id, peers=peers, group=group,
                               journal_entries_max=JOURNAL_ENTRIES_MAX)
    founding_voter(log.data_dir, config)
    return ReplicationNode(config, log, log.data_dir, clock=clock, rng=random.Random(7))


def elect(node: ReplicationNode, clock: Clock, voter: int) -> None:
    """`node` wins the next epoch with `voter`'s (pre-)vote."""
    clock.now_s += 10.0
    node.tick()
    assert node.state.pre_voting
    epoch = node.state.epoch + 1
    with node._lock:
        node._step_locked(raft.VoteResponse(voter, epoch, True, pre_vote=True))
        node._step_locked(raft.VoteResponse(voter, epoch, True))
    assert node.state.role is raft.Role.LEADER and node.state.epoch == epoch


def replicate(leader: ReplicationNode, follower: ReplicationNode) -> None:
    """One fetch of `follower` from `leader`, its answer absorbed (topic entries only: no
    batch bytes travel in this test)."""
    request = ReplicaFetchRequest(follower.config.node_id, leader.state.epoch,
                                  follower.journal.end, follower.journal.last_epoch, 1 << 20, 0)
    response, entries = leader.answer_fetch(request)
    assert all(entry.kind is not EntryKind.BATCH for entry in entries)
    headers = tuple(EntryHeader(entry.index, entry.epoch, entry.kind, entry.topic,
                                entry.partition, entry.base_offset, entry.record_count,
                                entry.partitions) for entry in entries)
    follower._absorb_fetch(leader.config.node_id, replace(response, entries=headers),
                           request.fetch_end)


def catch_up(leader: ReplicationNode, follower: ReplicationNode) -> None:
    """Fetch until the follower holds the leader's journal and knows its commit."""
    for _ in range(4):
        replicate(leader, follower)
    assert follower.journal.end == leader.journal.end
    assert follower.state.commit == leader.state.commit


@pytest.fixture
def brokers(tmp_path):
    clock = Clock()
    one, two = Broker(1, tmp_path, clock), Broker(2, tmp_path, clock)
    try:
        yield clock, one, two
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("compacted", [False, True], ids=["entries", "compacted"])
def test_a_leader_with_a_stale_metadata_copy_never_reopens_what_the_group_closed(brokers,
                                                                                compacted):
    clock, one, two = brokers
    elect(one.metadata, clock, voter=2)
    elect(one.data, clock, voter=2)
    created, _epoch = one.managers[0].journal_create("t", 1)
    catch_up(one.metadata, two.metadata)
    assert one.mirror.round_once() == [OpenTopic("t", 1, created.topic_id)]
    catch_up(one.data, two.data)
    assert "t" in two.logs[1].topics()

    # The metadata group deletes t. Broker 2 holds the delete, but only broker 3's fetch
    # made it committed: broker 2's copy does not know yet.
    one.managers[0].journal_delete("t")
    replicate(one.metadata, two.metadata)
    fetch_everything(one.metadata, follower=3)
    metadata_end = one.metadata.state.commit
    assert metadata_end == one.metadata.journal.end == two.metadata.journal.end
    assert one.mirror.round_once() == [CloseTopic("t", created.topic_id, metadata_end)]
    catch_up(one.data, two.data)
    if compacted:
        two.data._maybe_compact()  # the close is folded into the snapshot
        assert two.data.journal.start == two.data.journal.end
    assert "t" not in two.logs[1].topics(), "the close is committed and applied on broker 2"

    # The scenario: broker 2's copy of the metadata group lags behind the close, and still
    # shows the closed incarnation live.
    stale = two.topics[0].at(two.metadata.state.commit)
    assert stale.end < metadata_end and stale.topics["t"].topic_id == created.topic_id

    # The data group's leadership moves to broker 2 (broker 3 votes).
    elect(two.data, clock, voter=3)
    assert two.mirror.round_once() == [], "a stale copy must not re-open a closed incarnation"
    assert two.mirror.held_back == 1
    assert "t" not in two.logs[1].topics()
    confirm_lease(two.data, follower=3)
    with pytest.raises(UnknownTopicOrPartitionError):
        two.managers[1].partition("t", 0).append(batch(b"lost", producer_id=new_producer_id(),
                                                       sequence=0))

    # Once its copy has caught up, the mirror goes on: t stays closed, a new t opens.
    catch_up(one.metadata, two.metadata)
    assert two.mirror.round_once() == [] and two.mirror.held_back == 1
    again, _epoch = one.managers[0].journal_create("t", 2)
    fetch_everything(one.metadata, follower=3)
    catch_up(one.metadata, two.metadata)
    assert two.mirror.round_once() == [OpenTopic("t", 2, again.topic_id)]
    assert two.logs[1].topics()["t"] == 2
