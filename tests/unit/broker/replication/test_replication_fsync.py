"""The replication fsync policy (docs/replication.md, "Durability"), on the real ReplicationNode,
ReplicaManager, Journal and Log objects. Every fsync the process makes is recorded (it still
happens) together with what the journal and the partition held at that moment, so a test can say
which entries an fsync covered. The network is played by hand as in test_replication_safety.py."""

from __future__ import annotations

import errno
import os
import random
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication.errors import SyncFailedError
from services.broker.replication.journal_record import JOURNAL_FILE
from services.broker.replication.node import (
    PeerAddress,
    ReplicationConfig,
    ReplicationFsync,
    ReplicationFsyncError,
    ReplicationNode,
)
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
    answer,
    confirm_lease,
    elect,
    fetch_everything,
    follower_keeping_up,
    leader_with_topic,
    produce_deferred,
    stamped,
)
from tests.unit.broker.storage.batches import SMALL, batch


@dataclass(frozen=True)
class Fsync:
    path: str
    journal_end: int  # entries in the journal when this fsync ran
    t_end_offset: int  # log end of t/0 when it ran (-1: no such partition yet)


class FsyncRecorder:
    """os.fsync, recorded: the file it synced and what the node's journal and t/0 held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Log) -> None:
        self.calls: list[Fsync] = []
        self.node: ReplicationNode | None = None
        self._log = log
        real = os.fsync

        def fsync(fd: int) -> None:
            real(fd)
            journal_end = self.node.journal.end if self.node is not None else -1
            leo = (self._log.partition("t", 0).log_end_offset if "t" in self._log.topics()
                   else -1)
            self.calls.append(Fsync(os.readlink(f"/proc/self/fd/{fd}"), journal_end, leo))

        monkeypatch.setattr(os, "fsync", fsync)

    def journal_synced_end(self) -> int:
        """The most entries a journal fsync has covered so far."""
        return max((call.journal_end for call in self.calls
                    if Path(call.path).name == JOURNAL_FILE), default=0)

    def t_synced_end_offset(self) -> int:
        """The highest t/0 log end a segment fsync has covered so far."""
        directory = str(self._log.partition("t", 0).directory.resolve())
        return max((call.t_end_offset for call in self.calls
                    if call.path.endswith(".log") and call.path.startswith(directory + "/")),
                   default=-1)

    def data_fsyncs(self) -> list[Fsync]:
        """Fsyncs of the journal or of a segment file (not quorum files, not directories)."""
        return [call for call in self.calls
                if Path(call.path).name == JOURNAL_FILE or call.path.endswith(".log")]


@pytest.fixture
def log(tmp_path):
    with Log(tmp_path / "data", SMALL) as store:
        yield store


def node_with(policy: ReplicationFsync, node_id: int, log: Log, clock: Clock
              ) -> ReplicationNode:
    peers = tuple(PeerAddress(peer, "127.0.0.1", 1) for peer in (1, 2, 3) if peer != node_id)
    config = ReplicationConfig(node_id=node_id, peers=peers, fsync=policy,
                               tick_interval_s=0.001)
    founding_voter(log.data_dir, config)
    return ReplicationNode(config, log, log.data_dir, clock=clock, rng=random.Random(7))


def three_entries(data: bytes) -> list[EntryHeader]:
    return [EntryHeader(0, 1, EntryKind.NOOP),
            EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1),
            EntryHeader(2, 1, EntryKind.BATCH, "t", 0, 0, 1, data_bytes=len(data))]


def next_fetch_request(node: ReplicationNode, monkeypatch: pytest.MonkeyPatch
                       ) -> ReplicaFetchRequest:
    """The REPLICA_FETCH the follower's loop sends next (it is not delivered)."""
    sent: list[ReplicaFetchRequest] = []

    def send(_peer: int, request) -> Future:
        sent.append(request)
        future: Future = Future()
        future.set_result((1, b""))  # an error code: the round ends without an answer
        return future

    monkeypatch.setattr(node._peer_requests, "send", send)
    node._fetch_once(1)
    assert len(sent) == 1
    return sent[0]


# -- the follower: fsync before the fetch that acknowledges ----------------------------------


def test_entry_follower_reports_no_fetch_end_past_what_it_fsynced(log, monkeypatch):
    fsyncs = FsyncRecorder(monkeypatch, log)
    follower = node_with(ReplicationFsync.ENTRY, 2, log, Clock())
    fsyncs.node = follower
    try:
        first = stamped(batch(b"a"), 0)
        follower._absorb_fetch(1, answer(1, 0, three_entries(first), first, leader=1))
        assert follower.journal.end == 3
        assert fsyncs.journal_synced_end() < 3  # applied, not yet synced
        request = next_fetch_request(follower, monkeypatch)
        assert request.fetch_end == 3
        assert fsyncs.journal_synced_end() >= request.fetch_end
        assert fsyncs.t_synced_end_offset() >= 1  # the batch's bytes, not only its entry

        second = stamped(batch(b"b"), 1)
        follower._absorb_fetch(1, answer(1, 3, [
            EntryHeader(3, 1, EntryKind.BATCH, "t", 0, 1, 1, data_bytes=len(second))],
            second, leader=1))
        syncs_before = follower.syncs
        request = next_fetch_request(follower, monkeypatch)
        assert request.fetch_end == 4 and follower.syncs == syncs_before + 1  # one per round
        assert fsyncs.journal_synced_end() >= 4 and fsyncs.t_synced_end_offset() >= 2
    finally:
        follower.stop()


def test_entry_follower_whose_fsync_fails_acknowledges_nothing_more(log, monkeypatch):
    follower = node_with(ReplicationFsync.ENTRY, 2, log, Clock())
    try:
        data = stamped(batch(b"a"), 0)
        follower._absorb_fetch(1, answer(1, 0, three_entries(data), data, leader=1))

        def failing_fsync(_fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing_fsync)
        sent: list[ReplicaFetchRequest] = []
        monkeypatch.setattr(follower._peer_requests, "send",
                            lambda _peer, request: sent.append(request))
        with pytest.raises(SyncFailedError, match="entries 0..3 failed"):
            follower._fetch_once(1)  # the loop logs it and tries again next round
        assert sent == [] and follower.synced_end == 0
    finally:
        monkeypatch.undo()
        follower.stop()


def test_none_follower_fetches_without_fsync(log, monkeypatch):
    fsyncs = FsyncRecorder(monkeypatch, log)
    follower = node_with(ReplicationFsync.NONE, 2, log, Clock())
    fsyncs.node = follower
    try:
        data = stamped(batch(b"a"), 0)
        follower._absorb_fetch(1, answer(1, 0, three_entries(data), data, leader=1))
        request = next_fetch_request(follower, monkeypatch)
        assert request.fetch_end == 3
        assert fsyncs.data_fsyncs() == [] and follower.syncs == 0
        assert follower.synced_end is None
    finally:
        monkeypatch.undo()  # stop() flushes the journal: not the path under test
        follower.stop()


# -- the leader: its own copy counts once fsynced ---------------------------------------------


def test_entry_leader_counts_its_own_entry_only_once_fsynced(log, monkeypatch):
    fsyncs = FsyncRecorder(monkeypatch, log)
    clock = Clock()
    leader = node_with(ReplicationFsync.ENTRY, 1, log, clock)
    fsyncs.node = leader
    try:
        elect(leader, clock)  # NOOP @0, in the page cache only
        fetch_everything(leader, follower=2)  # broker 2 holds it: 1 of the 2 needed
        assert leader.state.commit == 0, "the leader's unsynced NOOP counted toward a majority"
        leader.sync_appended()
        assert fsyncs.journal_synced_end() >= 1 and leader.synced_end == 1
        assert leader.state.commit == 1
    finally:
        leader.stop()


def test_none_leader_counts_its_own_entry_at_once(log, monkeypatch):
    fsyncs = FsyncRecorder(monkeypatch, log)
    clock = Clock()
    leader = node_with(ReplicationFsync.NONE, 1, log, clock)
    fsyncs.node = leader
    try:
        elect(leader, clock)
        fetch_everything(leader, follower=2)
        assert leader.state.commit == 1
        leader.sync_appended()  # a no-op with policy none
        assert fsyncs.data_fsyncs() == [] and leader.syncs == 0
    finally:
        monkeypatch.undo()
        leader.stop()


@pytest.mark.parametrize("policy", list(ReplicationFsync))
def test_acknowledged_produce_was_fsynced_by_the_leader_only_with_entry(log, monkeypatch,
                                                                         policy):
    """acks=all: with `entry` the produce's batch and entry were fsynced on the leader before
    its answer (its own copy is one of the majority); with `none` nothing on that path
    fsyncs."""
    clock = Clock()
    leader = node_with(policy, 1, log, clock)
    manager = ReplicaManager(leader, ("127.0.0.1", 9092), log, ack_timeout_s=WAIT_S)
    try:
        elect(leader, clock)
        with follower_keeping_up(leader):
            leader.sync_appended()  # the loop's round does this for the NOOP
            manager.create_topic("t", 1)
        confirm_lease(leader)
        fsyncs = FsyncRecorder(monkeypatch, log)
        fsyncs.node = leader
        data = batch(b"x")
        result, await_acks = produce_deferred(manager, log, "t", data)
        with follower_keeping_up(leader):
            await_acks()
        entry = leader.journal.find_batch("t", 0, result.base_offset)
        assert entry is not None and leader.entry_committed(entry.index, entry.epoch)
        if policy is ReplicationFsync.ENTRY:
            assert fsyncs.journal_synced_end() >= entry.index + 1
            assert fsyncs.t_synced_end_offset() >= result.base_offset + result.record_count
        else:
            assert fsyncs.data_fsyncs() == []
    finally:
        monkeypatch.undo()
        leader.stop()


# -- configuration ---------------------------------------------------------------------------


def test_policy_names_parse_and_the_default_is_none(tmp_path):
    assert ReplicationConfig(node_id=1).fsync is ReplicationFsync.NONE
    assert ReplicationConfig(node_id=1, fsync="entry").fsync is ReplicationFsync.ENTRY
    assert ReplicationConfig(node_id=1, fsync="none").fsync is ReplicationFsync.NONE


@pytest.mark.parametrize("bad", ["always", "", "ENTRY", 1])
def test_an_unknown_policy_is_a_named_error_listing_the_values(tmp_path, bad):
    with pytest.raises(ReplicationFsyncError, match="not one of none, entry"):
        ReplicationConfig(node_id=1, fsync=bad)


def test_the_command_line_refuses_an_unknown_policy(capsys):
    from services.broker.__main__ import parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(["--node-id", "1", "--data-dir", "d", "--replication-fsync", "always"])
    assert exited.value.code == 2
    assert "--replication-fsync: invalid choice: 'always'" in capsys.readouterr().err
    assert parse_args(["--node-id", "1", "--data-dir", "d"]).replication_fsync == "none"


def test_the_commit_checkpoint_is_fsynced_outside_the_node_lock(log, monkeypatch):
    """Every commit_persist_interval_s the commit saver saves the commit and applied indexes
    (four fsyncs with their directories). Under the node lock, every produce, ack and follower
    fetch waited for them: the saves run with the lock free (a py-spy profile of an acks=all
    Kafka producer had the loop ~30 % of its time in these saves)."""
    clock = Clock()
    node, _manager = leader_with_topic(log, clock)
    saves: list[tuple[str, bool]] = []  # (file, node lock free while it was fsynced)
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if Path(path).name.startswith(("commit", "applied")):
            free = node._lock.acquire(blocking=False)
            if free:
                node._lock.release()
            saves.append((Path(path).name, free))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    clock.now_s += node.config.commit_persist_interval_s + 1.0
    node.save_commit_if_due()
    assert {name.split(".")[0] for name, _free in saves} == {"commit", "applied"}
    assert all(free for _name, free in saves), saves
    assert node._persisted_commit == node.state.commit == 2
