"""Journal compaction (docs/replication.md "Compaction"): the applied prefix becomes a
snapshot that keeps topic ids, the epoch cache and partition ends; the rewrite is crash-safe
at every step; a follower installs a leader's snapshot; reconcile starts from it."""

import os

import pytest

from services.broker.replication import journal as journal_module
from services.broker.replication.errors import CorruptJournalError, JournalCompactedError
from services.broker.replication.journal import Journal
from services.broker.replication.journal_record import (
    FILE_HEADER_BYTES,
    JOURNAL_FILE,
    JournalEntry,
    TopicId,
)
from services.broker.replication.reconcile import reconcile
from services.broker.replication.wire.peer_auth import OutOfRangeFieldError
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.replication.wire.replication_bounds import check_snapshot
from services.broker.replication.wire.snapshot_fetch import PartitionEnd, Snapshot, SnapshotTopic
from tests.unit.broker.replication.test_reconcile import Broker, batch


@pytest.fixture
def directory(tmp_path):
    return tmp_path / "@replication"


def entry(journal, epoch, kind, topic="", partition=0, base_offset=0, record_count=0,
          partitions=0, batch_bytes=0):
    return journal.append_replica(JournalEntry(journal.end, epoch, kind, topic, partition,
                                               base_offset, record_count, partitions,
                                               batch_bytes))


def history(journal):
    """Epoch 1: t created with batches, u created and deleted, internal batches; epoch 3: more
    batches of t and a re-created u. Returns the entries by name."""
    named = {"noop1": entry(journal, 1, EntryKind.NOOP),
             "create_t": entry(journal, 1, EntryKind.CREATE_TOPIC, "t", partitions=2)}
    entry(journal, 1, EntryKind.BATCH, "t", 0, 0, 3, batch_bytes=90)
    entry(journal, 1, EntryKind.BATCH, "t", 1, 0, 2, batch_bytes=80)
    named["create_u"] = entry(journal, 1, EntryKind.CREATE_TOPIC, "u", partitions=1)
    entry(journal, 1, EntryKind.BATCH, "u", 0, 0, 5, batch_bytes=70)
    entry(journal, 1, EntryKind.DELETE_TOPIC, "u")
    entry(journal, 1, EntryKind.BATCH, "__offsets", 0, 0, 1, batch_bytes=60)
    named["noop3"] = entry(journal, 3, EntryKind.NOOP)
    entry(journal, 3, EntryKind.BATCH, "t", 0, 3, 4, batch_bytes=90)
    entry(journal, 3, EntryKind.SKIPPED, "t", 1, 2, 6)
    named["create_u2"] = entry(journal, 3, EntryKind.CREATE_TOPIC, "u", partitions=3)
    entry(journal, 3, EntryKind.BATCH, "u", 2, 0, 1, batch_bytes=50)
    return named


def state(journal):
    return (journal.start, journal.end, journal.epochs(), journal.snapshot, journal.entries(),
            journal.incarnation("t"), journal.incarnation("u"), journal.tail_bytes)


def test_compaction_keeps_topic_ids_epochs_and_partition_ends(directory):
    journal = Journal(directory)
    named = history(journal)
    epochs, end = journal.epochs(), journal.end
    kept = journal.entries(11)
    assert journal.compact(11)
    assert (journal.start, journal.end, journal.epochs()) == (11, end, epochs)
    assert journal.entries() == kept and journal.entries(0, 12) == kept[:1]
    with pytest.raises(IndexError):
        journal.entry(10)
    # The epoch of a compacted entry is still known (an acknowledgement names it).
    assert [journal.epoch_of(i) for i in (0, 7, 8, 10, end - 1, end)] == [1, 1, 3, 3, 3, None]
    assert journal.end_of_epoch(2) == (1, 8)
    snapshot = journal.snapshot
    assert snapshot.end == 11 and snapshot.last_epoch == 3
    assert snapshot.topics == (SnapshotTopic("t", 1, named["create_t"].index, 2),)
    assert snapshot.partition_ends == (PartitionEnd("__offsets", 0, 1), PartitionEnd("t", 0, 7),
                                       PartitionEnd("t", 1, 8))
    assert journal.incarnation("t") == TopicId(1, named["create_t"].index)
    assert journal.incarnation("u") == named["create_u2"].topic_id
    # Entries after the snapshot still derive the ids of topics it created.
    delete = entry(journal, 3, EntryKind.DELETE_TOPIC, "t")
    assert delete.topic_id == TopicId(1, named["create_t"].index)
    assert journal.compacted_batch("t", 0, 3) and not journal.compacted_batch("t", 0, 7)
    journal.close()


def test_reopen_after_compaction_recovers_the_same_journal_and_appends_go_on(directory):
    journal = Journal(directory)
    history(journal)
    journal.compact(9)
    before = state(journal)
    journal.close()
    journal = Journal(directory)
    assert state(journal) == before
    entry(journal, 4, EntryKind.NOOP)
    journal.compact(journal.end - 1)  # a second compaction folds into the first snapshot
    again = state(journal)
    journal.close()
    journal = Journal(directory)
    assert state(journal) == again and journal.start == again[1] - 1
    assert journal.snapshot.topics[0].name == "t" and journal.snapshot.topics[1].name == "u"
    journal.close()


def test_compacting_everything_leaves_a_journal_of_its_snapshot_alone(directory):
    journal = Journal(directory)
    history(journal)
    end = journal.end
    journal.compact(end)
    assert (journal.start, journal.end, journal.entries(), journal.tail_bytes) == (end, end, [],
                                                                                    0)
    journal.close()
    journal = Journal(directory)
    assert (journal.start, journal.end, journal.last_epoch) == (end, end, 3)
    assert entry(journal, 3, EntryKind.NOOP).index == end
    journal.close()


def test_compaction_never_goes_back_nor_past_the_end_nor_lets_truncation_below_it(directory):
    journal = Journal(directory)
    history(journal)
    journal.compact(6)
    assert not journal.compact(4)
    with pytest.raises(ValueError):
        journal.compact(journal.end + 1)
    with pytest.raises(JournalCompactedError) as refused:
        journal.truncate(5)
    assert (refused.value.start, refused.value.requested) == (6, 5)
    journal.truncate(7)
    assert journal.end == 7
    journal.close()


def test_a_torn_temporary_file_is_dropped_and_the_journal_is_the_old_one(directory):
    journal = Journal(directory)
    history(journal)
    before = state(journal)
    journal.close()
    # A crash while compaction wrote the new file: journal.log.tmp holds a torn half.
    (directory / (JOURNAL_FILE + ".tmp")).write_bytes(b"KJNL\x00\x02\x00\x00" + b"\x00" * 7)
    journal = Journal(directory)
    assert state(journal) == before
    assert not (directory / (JOURNAL_FILE + ".tmp")).exists()
    journal.close()


def test_a_crash_before_the_rename_leaves_the_old_journal(directory, monkeypatch):
    journal = Journal(directory)
    history(journal)
    before = state(journal)

    def killed(_source, _target):
        raise OSError("killed before the rename")

    monkeypatch.setattr(journal_module.os, "replace", killed)
    with pytest.raises(OSError):
        journal.compact(9)
    monkeypatch.undo()
    assert state(journal) == before  # in memory, and the descriptor still appends
    entry(journal, 3, EntryKind.NOOP)
    after = state(journal)
    journal.close()
    journal = Journal(directory)
    assert state(journal) == after and journal.start == 0
    journal.close()


def test_a_crash_after_the_rename_leaves_the_new_journal(directory, monkeypatch):
    journal = Journal(directory)
    history(journal)

    def killed(_directory):
        raise OSError("killed before the directory was synced")

    monkeypatch.setattr(journal_module, "fsync_directory", killed)
    with pytest.raises(OSError):
        journal.compact(9)
    monkeypatch.undo()
    compacted = state(journal)
    assert compacted[0] == 9
    journal.close()
    journal = Journal(directory)
    assert state(journal) == compacted
    journal.close()


def test_a_torn_record_after_the_snapshot_is_cut_like_any_torn_tail(directory):
    journal = Journal(directory)
    history(journal)
    journal.compact(9)
    before = state(journal)
    entry(journal, 3, EntryKind.NOOP)
    journal.close()
    path = directory / JOURNAL_FILE
    os.truncate(path, path.stat().st_size - 3)
    journal = Journal(directory)
    assert state(journal) == before
    journal.close()


def test_a_damaged_snapshot_refuses_to_start(directory):
    journal = Journal(directory)
    history(journal)
    journal.compact(9)
    journal.close()
    path = directory / JOURNAL_FILE
    data = bytearray(path.read_bytes())
    data[FILE_HEADER_BYTES + 12] ^= 0xFF  # inside the snapshot, under its crc32c
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError, match="snapshot"):
        Journal(directory)


def test_install_replaces_a_prefix_with_the_leaders_snapshot(tmp_path):
    leader = Journal(tmp_path / "leader")
    history(leader)
    leader.compact(12)
    follower = Journal(tmp_path / "follower")
    entry(follower, 1, EntryKind.NOOP)  # a prefix of the leader's journal
    follower.install(leader.snapshot)
    assert (follower.start, follower.end, follower.epochs(), follower.entries()) == (
        12, 12, leader.epochs()[:2], [])
    for copied in leader.entries():
        follower.append_replica(copied)
    assert follower.epochs() == leader.epochs()
    assert follower.incarnation("u") == leader.incarnation("u")
    with pytest.raises(JournalCompactedError):
        follower.install(Snapshot(5, ((1, 0),)))
    follower.close()
    follower = Journal(tmp_path / "follower")
    assert (follower.start, follower.end, follower.snapshot) == (12, 13, leader.snapshot)
    follower.close()
    leader.close()


def test_snapshot_table_round_trips_and_its_bounds_refuse_disorder():
    snapshot = Snapshot(9, ((1, 0), (3, 8)), (SnapshotTopic("t", 1, 1, 2),),
                        (PartitionEnd("t", 0, 7), PartitionEnd("t", 1, 8)))
    assert check_snapshot(Snapshot.decode(snapshot.encode())) == snapshot
    # A topic id's index may lie beyond the snapshot (a data group's topics carry the metadata
    # group's ids), not beyond any index.
    for bad in (Snapshot(9, ((3, 0), (1, 8))), Snapshot(9, ((1, 0),), (SnapshotTopic(
            "t", 1, 2**62 + 1, 2),)), Snapshot(9, (), (SnapshotTopic("t", 1, 1, 0),))):
        with pytest.raises(OutOfRangeFieldError):
            check_snapshot(bad)


def test_reconcile_starts_from_the_snapshot(tmp_path):
    broker = Broker(tmp_path)
    broker.create("t", 1)
    broker.produce("t", 0, b"a", b"b")
    broker.create("gone", 1)
    broker.produce("gone", 0, b"x")
    broker.delete("gone")
    broker.produce("t", 0, b"c")
    broker.journal.compact(broker.journal.end)
    broker.produce("t", 0, b"d")
    broker.log.partition("t", 0).append(batch(b"unjournaled"))
    broker.restart()
    # "gone" was deleted by a folded (committed) entry whose delete this data directory had
    # not applied yet; the unjournaled tail of t goes; the snapshot's data stays.
    report = reconcile(broker.journal, broker.log, broker.journal.end)
    assert report.topics_deleted == ["gone"]
    assert broker.values("t", 0) == [b"a", b"b", b"c", b"d"]
    assert reconcile(broker.journal, broker.log, broker.journal.end).changed is False
    broker.close()
