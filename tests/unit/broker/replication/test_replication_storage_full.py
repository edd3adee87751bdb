"""Replication on a full disk: a leader whose journal append is refused answers the produce
with the storage error and keeps nothing; a follower whose apply is refused keeps what it
applied, stays behind and catches up; a broker that cannot store its vote or its NOOP does not
die, and is elected once there is room."""

import pytest

from common.kaska.errors import KaskaStorageError
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication import journal as journal_module
from services.broker.replication import raft
from services.broker.replication.node import PeerAddress, ReplicationConfig, ReplicationNode
from services.broker.replication.quorum_store import QuorumStore
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchResponse,
)
from services.broker.storage.errors import StorageFullError
from services.broker.storage.log import Log
from services.broker.storage.offset_index import OffsetIndex
from tests.unit.broker.replication.founding import founding_voter
from tests.unit.broker.storage.batches import SMALL, batch, records
from tests.unit.broker.storage.full_disk import (
    refuse_calls,
    refuse_reservations,
    refuse_writes,
)

WAIT_S = 10.0


@pytest.fixture
def log(tmp_path):
    with Log(tmp_path / "data", SMALL) as store:
        yield store


def values(log: Log, topic: str) -> list[tuple[int, bytes]]:
    return records(log.partition(topic, 0).read_bytes(0, 10**6))


def test_leader_journal_refusal_answers_the_storage_error(log, monkeypatch):
    node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir)
    node.start()
    try:
        manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
        manager.create_topic("t", 1)
        manager.partition("t", 0).append(batch(b"before"))
        journal_end = node.journal.end
        disk = refuse_writes(monkeypatch, journal_module)
        with pytest.raises(KaskaStorageError):
            manager.partition("t", 0).append(batch(b"refused"))
        partition = log.partition("t", 0)
        assert (partition.log_end_offset, node.journal.end) == (1, journal_end)
        assert values(log, "t") == [(0, b"before")]  # still read while the disk is full
        assert manager.partition("t", 0).high_watermark() == 1
        assert log.space.full
        disk.free()
        assert manager.partition("t", 0).append(batch(b"after")).base_offset == 1
        assert values(log, "t") == [(0, b"before"), (1, b"after")]
    finally:
        node.stop()


def test_leader_segment_refusal_keeps_journal_and_log_in_step(log, monkeypatch):
    node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir)
    node.start()
    try:
        manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
        manager.create_topic("t", 1)
        journal_end = node.journal.end
        disk = refuse_reservations(monkeypatch)
        with pytest.raises(KaskaStorageError):
            manager.partition("t", 0).append(batch(b"refused"))
        assert (log.partition("t", 0).log_end_offset, node.journal.end) == (0, journal_end)
        disk.free()
        assert manager.partition("t", 0).append(batch(b"after")).base_offset == 0
    finally:
        node.stop()


def _follower(log: Log) -> ReplicationNode:
    config = ReplicationConfig(node_id=2, peers=(PeerAddress(1, "127.0.0.1", 1),))
    founding_voter(log.data_dir, config)
    return ReplicationNode(config, log, log.data_dir)  # not started: the test feeds fetches


def _leader_answer(entries, data: bytes) -> ReplicaFetchResponse:
    return ReplicaFetchResponse(1, 1, 0, FetchOutcome.ENTRIES, tuple(entries), data)


def test_follower_apply_refused_stays_behind_then_catches_up(log, monkeypatch):
    first, second = batch(b"one"), batch(b"two")
    entries = [EntryHeader(0, 1, EntryKind.NOOP),
               EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1),
               EntryHeader(2, 1, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(first))]
    follower = _follower(log)
    disk = refuse_reservations(monkeypatch)
    with pytest.raises(StorageFullError):
        follower._absorb_fetch(1, _leader_answer(entries, first))
    # Whole entries only: the topic and its entry made it, the batch and its entry did not.
    assert follower.journal.end == 2 and log.partition("t", 0).log_end_offset == 0
    assert follower.state.log.end == follower.journal.end  # the next fetch starts there
    assert follower.state.leader_id == 1
    disk.free()
    stamped = bytearray(second)
    stamped[:8] = (1).to_bytes(8, "big")  # the leader's stamp: base offset 1
    follower._absorb_fetch(1, _leader_answer(
        [entries[2], EntryHeader(3, 1, EntryKind.BATCH, "t", 0, 1, 1,
                                 data_bytes=len(stamped))], first + bytes(stamped)))
    assert follower.journal.end == 4
    assert values(log, "t") == [(0, b"one"), (1, b"two")]
    follower.journal.close()


def test_follower_create_topic_refused_is_applied_again(log, monkeypatch):
    entries = [EntryHeader(0, 1, EntryKind.CREATE_TOPIC, "t", partitions=2)]
    follower = _follower(log)
    disk = refuse_calls(monkeypatch, OffsetIndex, "rewrite")  # no room for its segments
    with pytest.raises(StorageFullError):
        follower._absorb_fetch(1, _leader_answer(entries, b""))
    assert follower.journal.end == 0 and "t" not in log.topics()
    disk.free()
    follower._absorb_fetch(1, _leader_answer(entries, b""))
    assert follower.journal.end == 1 and log.topics()["t"] == 2
    follower.journal.close()


def test_lone_broker_without_room_for_its_vote_starts_and_is_elected_later(log, monkeypatch):
    disk = refuse_calls(monkeypatch, QuorumStore, "save")
    node = ReplicationNode(ReplicationConfig(node_id=1, storage_full_pause_s=0.01), log,
                           log.data_dir)
    node.start()  # no exception: a restart on a full disk must not kill the broker
    try:
        assert node.state.role is not raft.Role.LEADER and node.journal.leading_epoch is None
        assert log.space.full
        disk.free()
        assert node.wait_changed(lambda: node.state.role is raft.Role.LEADER, WAIT_S)
    finally:
        node.stop()


def test_leader_without_room_for_its_noop_does_not_lead(log, monkeypatch):
    node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir)
    disk = refuse_writes(monkeypatch, journal_module)
    with pytest.raises(StorageFullError):
        node.tick()
    state = node.state
    assert state.role is not raft.Role.LEADER and node.journal.leading_epoch is None
    assert node.journal.end == 0
    disk.free()
    node.tick()
    assert node.state.role is raft.Role.LEADER and node.journal.end == 1
    assert node.journal.entry(0).epoch == node.state.epoch
    node.journal.close()
