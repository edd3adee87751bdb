"""ReplicaManager.await_applied, stepped by hand: DeleteRecords' answer promises the move is
done here, so it waits until the committed entry is applied, and not a step longer. The real
node publishes a commit a moment before it applies it (same lock, same step), a window too
narrow to hold open with real threads; a node whose applied index the test moves, re-checking
the wait's predicate after each move as ReplicationNode.wait_changed does after each commit,
plays it out."""

from __future__ import annotations

from types import SimpleNamespace

from services.broker.cluster.replica_manager import ReplicaManager
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
