"""ReplicationNode's commit checks, on the real node, journal and log (the network played by
hand as in test_replication_safety.py): how often the commit checkpoint is saved, which fsyncs
the leader makes for the entries it counts, what a wait on a stopping node answers, a full disk
while saving the commit or the applied index, and the partitions a commit makes visible."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication.node import ReplicationFsync
from services.broker.replication.quorum_store import AppliedStore, CommitStore
from services.broker.replication.wire.replica_fetch import EntryKind
from tests.unit.broker.replication.test_replication_fsync import node_with
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    cluster_node,
    elect,
    fetch_everything,
    follower_keeping_up,
    leader_with_topic,
)
from tests.unit.broker.replication.test_replication_safety import log as log  # noqa: F401
from tests.unit.broker.storage.batches import batch
from tests.unit.broker.storage.full_disk import refuse_calls

INTERVAL_S = 1.0  # a whole number of seconds: the clock lands on the interval exactly


def _count_saves(monkeypatch) -> list[int]:
    """The commits CommitStore.save is asked to write."""
    saved: list[int] = []
    real = CommitStore.save

    def save(store, commit: int) -> None:
        if type(store) is CommitStore:
            saved.append(commit)
        real(store, commit)

    monkeypatch.setattr(CommitStore, "save", save)
    return saved


# -- the commit checkpoint ---------------------------------------------------------------------


def test_a_moved_commit_is_saved_at_most_once_per_interval(log, monkeypatch):
    """Each save is four fsyncs: the commit saver writes a moved commit once the last save is
    `commit_persist_interval_s` old (at that age exactly, too), never more often."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        monkeypatch.setattr(
            node, "config", replace(node.config, commit_persist_interval_s=INTERVAL_S)
        )
        saved = _count_saves(monkeypatch)
        clock.now_s += INTERVAL_S
        node.save_commit_if_due()
        assert saved == [2]
        with follower_keeping_up(node):
            manager.partition("t", 0).append(batch(b"moves the commit"))
        assert node.state.commit == 3
        clock.now_s += INTERVAL_S / 2
        node.save_commit_if_due()
        assert saved == [2], "saved again within the interval"
        clock.now_s += INTERVAL_S / 2  # the last save is exactly INTERVAL_S old
        node.save_commit_if_due()
        assert saved == [2, 3]
        node.save_commit_if_due()
        assert saved == [2, 3], "an unmoved commit saved again"
    finally:
        node.stop()


def test_a_full_disk_while_saving_the_commit_is_retried_not_raised(log, monkeypatch):
    """The saved commit is a lower bound a restart starts from: no room to save it leaves the
    older one (safe) and the commit saver thread alive, and the next due save writes it."""
    clock = Clock()
    node, _manager = leader_with_topic(log, clock)
    try:
        persisted = node._persisted_commit
        disk = refuse_calls(monkeypatch, CommitStore, "save")
        clock.now_s += node.config.commit_persist_interval_s + 1.0
        node.save_commit_if_due()
        assert disk.refused == 1 and node._persisted_commit == persisted
        disk.free()
        clock.now_s += node.config.commit_persist_interval_s + 1.0
        node.save_commit_if_due()
        assert node._persisted_commit == node.state.commit == 2
    finally:
        node.stop()


def test_a_full_disk_while_saving_the_applied_index_after_a_delete_stops_nothing(log, monkeypatch):
    """A committed DELETE_TOPIC is applied (the files go), then the applied index is saved; no
    room for that save leaves the older index (a restart applies the delete again: deletes
    are idempotent). The follower's fetch that commits it is answered, and the delete is."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        disk = refuse_calls(monkeypatch, AppliedStore, "save")
        end = node.journal.end
        with ThreadPoolExecutor(max_workers=1) as pool:
            deleted = pool.submit(manager.delete_topic, "t", lambda _name: None)
            while node.journal.end == end and not deleted.done():
                threading.Event().wait(0.005)
            assert node.journal.entry(end).kind is EntryKind.DELETE_TOPIC, deleted
            fetch_everything(node)  # broker 2 holds it: committed and applied
            entry = deleted.result(WAIT_S)
        assert disk.refused >= 1, "the scenario: the applied index found no room"
        assert entry.index == end and "t" not in log.topics()
        assert node.applied == node.state.commit == end + 1
    finally:
        node.stop()


# -- the leader's fsyncs (policy `entry`) -----------------------------------------------------


def test_a_sync_with_nothing_new_to_sync_fsyncs_nothing(log):
    clock = Clock()
    leader = node_with(ReplicationFsync.ENTRY, 1, log, clock)
    try:
        elect(leader, clock)
        leader.sync_appended()
        assert leader.syncs == 1 and leader.synced_end == leader.journal.end == 1
        leader.sync_appended()
        leader.sync_appended(upto=1)
        assert leader.syncs == 1
    finally:
        leader.stop()


class QueueCountingLock:
    """A lock that counts the threads that came to take it (holding it or queued)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._came = threading.Condition()
        self.came = 0

    def __enter__(self) -> None:
        with self._came:
            self.came += 1
            self._came.notify_all()
        self._lock.acquire()

    def __exit__(self, *_exc) -> None:
        self._lock.release()

    def wait_for_queued(self, count: int) -> bool:
        with self._came:
            return self._came.wait_for(lambda: self.came >= count, WAIT_S)


def test_a_waiter_whose_entries_the_sync_ahead_of_it_covered_syncs_nothing(log, monkeypatch):
    """Grouped fsyncs: a waiter queued behind a sync that covered its entry returns without an
    fsync of its own, though more entries were appended meanwhile (theirs wait for their own
    waiters)."""
    clock = Clock()
    leader = node_with(ReplicationFsync.ENTRY, 1, log, clock)
    try:
        elect(leader, clock)
        leader.sync_appended()
        leader.journal.append(leader.state.epoch, EntryKind.NOOP)
        leader.leader_appended()
        mine = leader.journal.end  # 2: the waiter's entry is the one at 1
        lock = QueueCountingLock()
        monkeypatch.setattr(leader, "_sync_lock", lock)
        release = threading.Event()
        real_sync_partitions = leader._effects.sync_partitions

        def slow_sync_partitions(entries) -> None:
            release.wait(WAIT_S)
            real_sync_partitions(entries)

        monkeypatch.setattr(leader._effects, "sync_partitions", slow_sync_partitions)
        ahead = threading.Thread(target=leader.sync_appended)
        ahead.start()
        assert lock.wait_for_queued(1)
        waiter = threading.Thread(target=leader.sync_appended, args=(mine,))
        waiter.start()
        assert lock.wait_for_queued(2), "the scenario: the waiter queued behind the sync"
        leader.journal.append(leader.state.epoch, EntryKind.NOOP)  # appended meanwhile
        leader.leader_appended()
        release.set()
        ahead.join(WAIT_S)
        waiter.join(WAIT_S)
        assert not ahead.is_alive() and not waiter.is_alive()
        assert leader.synced_end == mine and leader.syncs == 2  # the first one, and `ahead`
    finally:
        leader.stop()


# -- waits and wake-ups -------------------------------------------------------------------------


def test_a_wait_on_a_stopping_node_says_its_condition_did_not_hold(log):
    """A stopping node wakes every waiter; the answer is the condition's, not "woken"."""
    node = cluster_node(1, log, Clock())
    node.stop()
    assert node.wait_changed(lambda: False, WAIT_S) is False
    assert node.wait_changed(lambda: True, WAIT_S) is True


def test_a_commit_tells_the_broker_which_partitions_became_visible(log):
    """The broker wakes the long-polls of the partitions a commit moved (the notifier): each
    commit names the partitions whose high watermark it moved, and only those."""
    clock = Clock()
    visible: list[tuple[str, int]] = []
    node = cluster_node(1, log, clock, on_partition_visible=lambda t, p: visible.append((t, p)))
    try:
        elect(node, clock)
        manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
        with follower_keeping_up(node):
            manager.create_topic("t", 2)
            assert visible == []
            manager.partition("t", 1).append(batch(b"seen"))
        assert visible == [("t", 1)]
    finally:
        node.stop()
