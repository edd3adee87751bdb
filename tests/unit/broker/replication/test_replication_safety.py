"""The paths that once lost acknowledged writes, each replayed on the real ReplicationNode,
ReplicaManager, Journal and Log objects. The network is played by hand: a peer's answers are
built as that peer (`L2`) would build them from its journal and fed to `_absorb_fetch`, and a
follower's fetch is `answer_fetch`; a paused thread is a call that has not been made yet."""

from __future__ import annotations

import logging
import random
import threading
from contextlib import contextmanager

import pytest

from common.kaska.errors import NotEnoughReplicasError, NotLeaderError
from common.kaska.protocol.produce import ACKS_ALL
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication import raft
from services.broker.replication.errors import CorruptJournalError
from services.broker.replication.journal_record import FILE_HEADER_BYTES, JOURNAL_FILE
from services.broker.replication.node import (
    REPLICATION_DIR,
    PeerAddress,
    ReplicationConfig,
    ReplicationNode,
)
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.storage.log import Log
from tests.unit.broker.replication.founding import founding_voter
from tests.unit.broker.storage.batches import SMALL, batch, new_producer_id, records

WAIT_S = 10.0


class Clock:
    """The nodes' monotonic clock, moved by hand (elections and check-quorum)."""

    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def log(tmp_path):
    with Log(tmp_path / "data", SMALL) as store:
        yield store


def values(log: Log, topic: str) -> list[tuple[int, bytes]]:
    return records(log.partition(topic, 0).read_bytes(0, 10**6))


def cluster_node(node_id: int, log: Log, clock: Clock, **callbacks) -> ReplicationNode:
    """A broker of a three-broker cluster whose loop is not started: the test is its network."""
    peers = tuple(PeerAddress(peer, "127.0.0.1", 1) for peer in (1, 2, 3) if peer != node_id)
    config = ReplicationConfig(node_id=node_id, peers=peers)
    founding_voter(log.data_dir, config)
    return ReplicationNode(config, log, log.data_dir, clock=clock, rng=random.Random(7),
                           **callbacks)


def elect(node: ReplicationNode, clock: Clock) -> None:
    """Node wins the next epoch with broker 2's (pre-)vote."""
    clock.now_s += 10.0
    node.tick()
    assert node.state.pre_voting
    epoch = node.state.epoch + 1
    with node._lock:
        node._step_locked(raft.VoteResponse(2, epoch, True, pre_vote=True))
        node._step_locked(raft.VoteResponse(2, epoch, True))
    assert node.state.role is raft.Role.LEADER and node.state.epoch == epoch


def fetch_everything(node: ReplicationNode, follower: int = 2) -> None:
    """`follower` fetches from the leader holding its whole journal: the commit follows."""
    node.answer_fetch(ReplicaFetchRequest(follower, node.state.epoch, node.journal.end,
                                          node.journal.last_epoch, 1 << 20, 0))


def confirm_lease(node: ReplicationNode, follower: int = 2) -> None:
    """Two fetches in a row: the second shows the leader its first answer was read, which
    gives it the lease (raft.holds_lease) until the clock moves 0.8 s on."""
    fetch_everything(node, follower)
    fetch_everything(node, follower)
    assert node.holds_lease()


@contextmanager
def follower_keeping_up(node: ReplicationNode):
    """Broker 2 fetching in a loop while the test's produce or create waits for its commit."""
    stop = threading.Event()

    def pump() -> None:
        while not stop.wait(0.002):
            if node.state.role is raft.Role.LEADER:
                fetch_everything(node)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def stamped(data: bytes, base_offset: int) -> bytes:
    """A batch as a leader stored it at `base_offset`."""
    out = bytearray(data)
    out[:8] = base_offset.to_bytes(8, "big")
    return bytes(out)


def answer(epoch: int, commit: int, entries=(), data: bytes = b"", leader: int = 2
           ) -> ReplicaFetchResponse:
    return ReplicaFetchResponse(epoch, leader, commit, FetchOutcome.ENTRIES, tuple(entries),
                                data)


def diverging(epoch: int, commit: int, at_epoch: int, end: int) -> ReplicaFetchResponse:
    return ReplicaFetchResponse(epoch, 2, commit, FetchOutcome.DIVERGING,
                                diverging_epoch=at_epoch, diverging_end=end)


def produce_deferred(manager: ReplicaManager, log: Log, topic: str, data: bytes):
    def fill(region: memoryview) -> None:
        region[:] = data

    return manager.partition(topic, 0).append_deferred(len(data), fill, ACKS_ALL)


def leader_with_topic(log: Log, clock: Clock) -> tuple[ReplicationNode, ReplicaManager]:
    """Broker 1 leads epoch 1 with [NOOP(1) @0, CREATE t(1) @1], both committed."""
    node = cluster_node(1, log, clock)
    elect(node, clock)
    manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
    with follower_keeping_up(node):
        manager.create_topic("t", 1)
    assert node.state.commit == 2 and node.journal.end == 2
    confirm_lease(node)
    return node, manager


# -- an acknowledgement names its entry ------------------------------------------------------------


def test_produce_is_not_acknowledged_by_another_leaders_entry_at_its_offset(log):
    """L appends MINE (entry 2, epoch 1, offset 0); its answer waits (a pipelined produce held
    by the connection, a paused thread) while L2 of epoch 2 -- which never got MINE -- has
    committed THEIRS at the same offset. L steps down, truncates MINE, applies THEIRS and the
    commit: the offset is covered, but MINE was not committed, so the answer is NOT_LEADER."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        result, await_acks = produce_deferred(manager, log, "t", batch(b"mine"))
        assert result.base_offset == 0 and node.journal.entry(2).epoch == 1
        theirs = stamped(batch(b"theirs"), 0)
        # L2's journal: NOOP(1) @0, CREATE t(1) @1, NOOP(2) @2, THEIRS(2) @3; commit 4.
        node._absorb_fetch(2, diverging(2, 4, at_epoch=1, end=2))
        assert node.state.role is raft.Role.FOLLOWER and node.journal.end == 2  # MINE cut
        node._absorb_fetch(2, answer(2, 4, [
            EntryHeader(2, 2, EntryKind.NOOP),
            EntryHeader(3, 2, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(theirs))], theirs))
        assert node.state.commit == 4 and manager.partition("t", 0).high_watermark() == 1
        assert values(log, "t") == [(0, b"theirs")]  # the scenario happened: offset covered
        with pytest.raises(NotLeaderError):
            await_acks()
    finally:
        node.stop()


def test_a_retry_is_acknowledged_by_its_originals_entry(log):
    """An idempotent retry stores nothing; its acknowledgement waits for the original batch's
    journal entry (found in the journal), and names it."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        data = batch(b"once", producer_id=new_producer_id(), sequence=0)
        first, await_first = produce_deferred(manager, log, "t", data)
        retry, await_retry = produce_deferred(manager, log, "t", data)
        assert retry.duplicate and retry.base_offset == first.base_offset == 0
        assert node.journal.end == 3  # one entry: the original's
        original = node.journal.find_batch("t", 0, 0)
        assert (original.index, original.epoch) == (2, 1)
        with follower_keeping_up(node):
            await_retry()
            await_first()
        assert node.entry_committed(2, 1)
    finally:
        node.stop()


def test_a_retry_of_a_batch_compacted_away_is_acknowledged(log):
    """A producer's retry of a batch committed so long ago that journal compaction folded its
    entry into the snapshot: the log finds the duplicate, the journal no entry, and the
    compacted prefix vouches for it (committed) -- a success, never NOT_ENOUGH_REPLICAS,
    which would make the producer retry forever."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        data = batch(b"long ago", producer_id=new_producer_id(), sequence=0)
        partition = manager.partition("t", 0)
        with follower_keeping_up(node):
            first = partition.append(data)
        assert node.state.commit == node.applied == node.journal.end == 3
        assert node.journal.compact(3)
        assert node.journal.find_batch("t", 0, first.base_offset) is None  # the scenario
        retry = partition.append(data)
        assert retry.duplicate and retry.base_offset == first.base_offset
        assert values(log, "t") == [(0, b"long ago")]
        with pytest.raises(NotEnoughReplicasError, match="no journal entry"):
            manager.batch_entry("t", 0, first.base_offset + 1)  # never written: not vouched
    finally:
        node.stop()


def test_a_leader_that_steps_down_in_its_own_epoch_answers_not_leader_at_once(log):
    """Check-quorum deposes a leader without a newer epoch (no follower fetched for the
    quorum timeout): its state says FOLLOWER of the same epoch. An acks=all write waiting
    for its entry is answered NOT_LEADER when that step is taken, not NOT_ENOUGH_REPLICAS
    after the whole ack timeout: the entry may still be committed by a successor, so the
    client must look for the leader."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        _result, await_acks = produce_deferred(manager, log, "t", batch(b"held"))
        epoch = node.state.epoch
        clock.now_s += node.raft_config.quorum_timeout_s + 1.0
        node.tick()
        assert (node.state.role, node.state.epoch) == (raft.Role.FOLLOWER, epoch)
        with pytest.raises(NotLeaderError):
            await_acks()
    finally:
        node.stop()


def test_create_is_not_acknowledged_by_another_leaders_entry_at_its_index(log, monkeypatch):
    """The same for CREATE_TOPIC (and DELETE_TOPIC, which waits the same way): the waiter,
    paused until L has stepped down and committed L2's NOOP at its index, answers NOT_LEADER."""
    clock = Clock()
    node = cluster_node(1, log, clock)
    elect(node, clock)
    fetch_everything(node)
    assert node.state.commit == 1
    manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
    real_wait = node.wait_changed

    def thaw_then_wait(predicate, timeout_s):
        monkeypatch.setattr(node, "wait_changed", real_wait)
        assert node.journal.entry(1).kind is EntryKind.CREATE_TOPIC  # ours, epoch 1
        # L2's journal: NOOP(1) @0, NOOP(2) @1; commit 2.
        node._absorb_fetch(2, diverging(2, 2, at_epoch=1, end=1))
        node._absorb_fetch(2, answer(2, 2, [EntryHeader(1, 2, EntryKind.NOOP)]))
        assert node.state.commit == 2 and node.journal.entry(1).kind is EntryKind.NOOP
        return real_wait(predicate, timeout_s)

    monkeypatch.setattr(node, "wait_changed", thaw_then_wait)
    try:
        with pytest.raises(NotLeaderError):
            manager.create_topic("t", 1)
        assert "t" not in log.topics()
    finally:
        node.stop()


# -- committed entries are applied once, topics have ids -------------------------------------------


@pytest.mark.parametrize("applied_index", ["kept", "lost"])
def test_restart_keeps_a_topic_recreated_after_a_committed_delete(tmp_path, applied_index):
    """Create t, produce, delete t, create t again, produce X (acknowledged); restart. The
    old DELETE is not applied again (persisted applied index); and were it applied again
    (the applied index lost), it names the first incarnation and leaves the second alone."""
    deleted: list[str] = []
    with Log(tmp_path / "data", SMALL) as log:
        node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir,
                               on_topic_deleted=deleted.append)
        node.start()
        try:
            manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
            manager.create_topic("t", 1)
            manager.partition("t", 0).append(batch(b"old"))
            manager.delete_topic("t", forget_offsets=lambda _topic: None)
            manager.create_topic("t", 1)
            manager.partition("t", 0).append(batch(b"X"))
        finally:
            node.stop()
    assert deleted == ["t"]
    if applied_index == "lost":
        for path in (tmp_path / "data" / REPLICATION_DIR).glob("applied*"):
            path.unlink()
    with Log(tmp_path / "data", SMALL) as log:
        node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir,
                               on_topic_deleted=deleted.append)
        try:
            assert "t" in log.topics() and values(log, "t") == [(0, b"X")]
            assert node.high_watermark("t", 0) == 1
            assert node.journal.incarnation("t") == (1, 4)
            if applied_index == "kept":
                assert deleted == ["t"], "the committed delete was applied again"
        finally:
            node.stop()


# -- DELETE t and CREATE t in one fetch ------------------------------------------------------------


@pytest.mark.parametrize("commit_with_entries", [True, False])
def test_delete_and_recreate_in_one_fetch_leave_the_new_topic(log, commit_with_entries):
    """A lagging follower gets [DELETE t, CREATE t, BATCH X] in one answer, with a commit past
    them or (a new leader whose commit lags) only later: the result is what applying the
    entries one by one gives -- t holds X, and stays through the delete's commit."""
    old, new = stamped(batch(b"old"), 0), stamped(batch(b"X"), 0)
    follower = cluster_node(2, log, Clock())
    try:
        follower._absorb_fetch(1, answer(1, 3, [
            EntryHeader(0, 1, EntryKind.NOOP),
            EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1),
            EntryHeader(2, 1, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(old))], old,
            leader=1))
        assert values(log, "t") == [(0, b"old")] and follower.state.commit == 3
        follower._absorb_fetch(1, answer(1, 6 if commit_with_entries else 3, [
            EntryHeader(3, 1, EntryKind.DELETE_TOPIC, "t"),
            EntryHeader(4, 1, EntryKind.CREATE_TOPIC, "t", partitions=1),
            EntryHeader(5, 1, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(new))], new,
            leader=1))
        assert follower.journal.end == 6
        if not commit_with_entries:
            follower._absorb_fetch(1, answer(1, 6, leader=1))
        assert follower.state.commit == 6
        assert "t" in log.topics() and values(log, "t") == [(0, b"X")]
        assert follower.high_watermark("t", 0) == 1
        assert follower.journal.incarnation("t") == (1, 4)
    finally:
        follower.stop()


# -- only entries that match the leader count ------------------------------------------------------


def test_deposed_leaders_unannounced_entry_is_never_counted_committed(log, monkeypatch):
    """A produce journals MINE (entry 2, epoch 1) while L's state machine takes the step that
    deposes it (check-quorum), and has not called leader_appended() yet. L's next fetch from
    L2 (epoch 2: NOOP(2) @2, THEIRS @3, commit 4) carries the end its state machine knew (2):
    L2's answer vouches for entries below 2 and its own, never for MINE. L does not count MINE,
    truncates it on L2's DIVERGING answer, and catches up."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    try:
        waiting = []
        real_step = raft.step

        def append_lands_during_the_step(config, state, event, now, rng):
            if isinstance(event, raft.Tick) and not waiting:
                # Another thread's produce: after the node's last look at the journal. It
                # passed its lease check before the 10 s went by (a slow thread).
                clock.now_s -= 10.0
                waiting.append(produce_deferred(manager, log, "t", batch(b"mine"))[1])
                clock.now_s += 10.0
            return real_step(config, state, event, now, rng)

        monkeypatch.setattr(raft, "step", append_lands_during_the_step)
        monkeypatch.setattr(node, "leader_appended", lambda: None)  # that thread, paused
        clock.now_s += 10.0
        node.tick()  # no follower fetched for 10 s: check-quorum deposes L
        monkeypatch.undo()
        (await_acks,) = waiting
        assert node.state.role is raft.Role.FOLLOWER
        assert node.journal.end == 3 and node.state.log.end == 2  # MINE, unannounced
        theirs = stamped(batch(b"theirs"), 0)
        node._absorb_fetch(2, answer(2, 4, [  # fetch_end: the state machine's end, 2
            EntryHeader(2, 2, EntryKind.NOOP),
            EntryHeader(3, 2, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(theirs))], theirs))
        assert node.state.commit == 2, "MINE, which L2 never vouched for, counted committed"
        assert not node.entry_committed(2, 1)
        # L's next fetch is (3, epoch 1): L2's epoch 1 ends at 2.
        assert (node.state.log.end, node.state.log.last_epoch) == (3, 1)
        node._absorb_fetch(2, diverging(2, 4, at_epoch=1, end=2))
        assert node.journal.end == 2 and node.counters.stale_divergences == 0
        node._absorb_fetch(2, answer(2, 4, [
            EntryHeader(2, 2, EntryKind.NOOP),
            EntryHeader(3, 2, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(theirs))], theirs))
        assert node.state.commit == 4 and [e.epoch for e in node.journal.entries()] == [
            1, 1, 2, 2]
        assert values(log, "t") == [(0, b"theirs")]
        with pytest.raises(NotLeaderError):
            await_acks()
    finally:
        node.stop()


def test_a_divergence_below_the_commit_is_logged_and_counted(log, caplog):
    follower = cluster_node(2, log, Clock())
    try:
        follower._absorb_fetch(1, answer(1, 2, [EntryHeader(0, 1, EntryKind.NOOP),
                                                EntryHeader(1, 1, EntryKind.NOOP)], leader=1))
        assert follower.state.commit == 2
        with caplog.at_level(logging.WARNING):
            follower._absorb_fetch(1, ReplicaFetchResponse(
                1, 1, 2, FetchOutcome.DIVERGING, diverging_epoch=0, diverging_end=0))
        assert follower.journal.end == 2  # nothing truncated below the commit
        assert follower.counters.stale_divergences == 1
        assert "below the commit index 2" in caplog.text
    finally:
        follower.stop()


# -- corruption is not a torn tail -----------------------------------------------------------------


def test_corrupt_first_record_refuses_to_start_and_keeps_every_topic(tmp_path):
    """One bad CRC in record 0 used to empty the journal, and reconcile then deleted every
    topic: now the broker refuses to start and the data directory is left as it was."""
    with Log(tmp_path / "data", SMALL) as log:
        node = ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir)
        node.start()
        try:
            manager = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
            manager.create_topic("t", 1)
            manager.partition("t", 0).append(batch(b"kept"))
        finally:
            node.stop()
    path = tmp_path / "data" / REPLICATION_DIR / JOURNAL_FILE
    with open(path, "r+b") as f:
        f.seek(FILE_HEADER_BYTES + 8 + 1)  # inside record 0's payload
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 0xFF]))
    damaged = path.read_bytes()
    with Log(tmp_path / "data", SMALL) as log:
        with pytest.raises(CorruptJournalError, match="at byte 8 "):
            ReplicationNode(ReplicationConfig(node_id=1), log, log.data_dir)
        assert "t" in log.topics() and values(log, "t") == [(0, b"kept")]
    assert path.read_bytes() == damaged
