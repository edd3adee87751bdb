"""ReplicaManager.await_applied, stepped by hand: DeleteRecords' answer promises the move is
done here, so it waits until the committed entry is applied, and not a step longer. The real
node publishes a commit a moment before it applies it (same lock, same step), a window too
narrow to hold open with real threads; a node whose applied index the test moves, re-checking
the wait's predicate after each move as ReplicationNode.wait_changed does after each commit,
plays it out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from common.kaska.errors import NotLeaderError
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication import raft
from services.broker.replication.journal_record import JournalEntry
from services.broker.replication.wire.replica_fetch import EntryKind

ENTRY = JournalEntry(5, 1, EntryKind.DELETE_RECORDS)


class AppliedByHand:
    """`applied` takes the values of `moves` one wait step at a time; a wait that runs out
    of moves with its predicate still false is a wait that lasted the whole ack timeout."""

    def __init__(self, applied: int, moves: list[int]) -> None:
        self.config = SimpleNamespace(node_id=1, peers=())
        self.applied = applied
        self.moves = moves
        self.timed_out = False

    def wait_changed(self, predicate, timeout_s: float) -> bool:
        while not predicate():
            if not self.moves:
                self.timed_out = True
                return False
            self.applied = self.moves.pop(0)
        return True


def manager_over(node: AppliedByHand) -> ReplicaManager:
    return ReplicaManager(node, ("127.0.0.1", 9092), log=None, ack_timeout_s=10.0,
                          topics=SimpleNamespace())


def test_an_entry_not_yet_applied_is_waited_for_until_it_is():
    node = AppliedByHand(applied=ENTRY.index - 1, moves=[ENTRY.index, ENTRY.index + 1, 9])
    manager_over(node).await_applied(ENTRY)
    assert node.applied == ENTRY.index + 1, "returned before the entry's effects were done"
    assert node.moves == [9] and not node.timed_out


def test_an_entry_applied_already_is_not_waited_for():
    node = AppliedByHand(applied=ENTRY.index + 3, moves=[])
    manager_over(node).await_applied(ENTRY)
    assert not node.timed_out, "waited out the ack timeout for an entry applied already"


class SyncedByHand:
    """A committed journal whose first `synced_end` entries are fsynced, of `end`: counts
    the fsyncs ReplicationNode.sync_appended would make (none when `upto` is synced)."""

    def __init__(self, synced_end: int, end: int) -> None:
        self.config = SimpleNamespace(node_id=1, peers=())
        self.synced_end, self.end = synced_end, end
        self.syncs = 0

    def sync_appended(self, upto: int | None = None) -> None:
        if upto is not None and self.synced_end >= upto:
            return
        self.syncs += 1
        self.synced_end = self.end

    def entry_committed(self, index: int, epoch: int) -> bool:
        return True

    def wait_changed(self, predicate, timeout_s: float) -> bool:
        return predicate()


def test_a_synced_entry_is_not_synced_again_for_entries_appended_after_it():
    """Policy `entry`: a waiter syncs up to its own entry; one already synced (a group sync
    before it covered it) leaves the later entries to their own waiters, instead of paying
    another fsync before its answer."""
    node = SyncedByHand(synced_end=ENTRY.index + 1, end=ENTRY.index + 2)
    manager_over(node).await_entry(ENTRY, ENTRY.epoch, "t/0")
    assert node.syncs == 0, "fsynced entries appended after the one it waited for"


def test_an_entry_not_yet_synced_is_synced_before_it_counts():
    node = SyncedByHand(synced_end=ENTRY.index, end=ENTRY.index + 1)
    manager_over(node).await_entry(ENTRY, ENTRY.epoch, "t/0")
    assert node.syncs == 1 and node.synced_end == ENTRY.index + 1


class FollowerOf:
    """A follower that knows `leader_id` (None: no leader elected) in epoch 3."""

    def __init__(self, leader_id: int | None) -> None:
        self.config = SimpleNamespace(node_id=1, peers=())
        self.state = SimpleNamespace(leader_id=leader_id, epoch=3, role=raft.Role.FOLLOWER)

    def peer_address(self, node_id: int) -> str:
        return f"broker{node_id}:9092"


@pytest.mark.parametrize(("leader_id", "told", "address"), [
    (None, r"no leader elected yet \(epoch 3\)", ""),
    (2, "is led by node 2", "broker2:9092"),
])
def test_not_leader_tells_the_client_who_leads(leader_id, told, address):
    """The answer's message and leader address (ErrorBody) say whom to ask next."""
    with pytest.raises(NotLeaderError, match=told) as refused:
        manager_over(FollowerOf(leader_id)).require_leader("t", 0)
    assert refused.value.leader == address
