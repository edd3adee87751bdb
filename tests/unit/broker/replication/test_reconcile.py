"""reconcile: every state a SIGKILL (or a lost page cache) can leave between the journal and the
data directory ends consistent, and a second run changes nothing."""

import logging

import pytest

from common.kaska.record_batch import encode_batch, iter_batches, iter_records
from services.broker.replication.journal import Journal, JournalEntry
from services.broker.replication.reconcile import TruncatedPartition, reconcile
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

SMALL = LogConfig(segment_bytes_max=4096, index_interval_bytes=256, batch_bytes_max=2048)
EPOCH = 1


def batch(*values: bytes) -> bytes:
    return encode_batch(list(values), timestamp_ms=1_000)


class Broker:
    """A journal and a data directory as a leader writes them (data first, then the entry)."""

    def __init__(self, data_dir, config=SMALL):
        self.data_dir = data_dir
        self.config = config
        self.log = Log(data_dir, config)
        self.journal = Journal(data_dir / "@replication")
        self.journal.set_leading_epoch(EPOCH)

    def create(self, topic, partitions=1, journaled=True):
        if journaled:
            self.journal.append(EPOCH, EntryKind.CREATE_TOPIC, topic=topic,
                                partitions=partitions)
        self.log.create_topic(topic, partitions)

    def produce(self, topic, partition, *values, journaled=True) -> JournalEntry | None:
        data = batch(*values)
        result = self.log.partition(topic, partition).append(data)
        if not journaled:
            return None  # killed between the data append and the journal entry
        return self.journal.append(EPOCH, EntryKind.BATCH, topic=topic, partition=partition,
                                   base_offset=result.base_offset,
                                   record_count=result.record_count, batch_bytes=len(data))

    def journal_only(self, topic, partition, *values) -> JournalEntry:
        """An entry whose batch never reached the partition (a lost page cache)."""
        data = batch(*values)
        base_offset = self.log.partition(topic, partition).log_end_offset
        return self.journal.append(EPOCH, EntryKind.BATCH, topic=topic, partition=partition,
                                   base_offset=base_offset, record_count=len(values),
                                   batch_bytes=len(data))

    def delete(self, topic) -> JournalEntry:
        """The DELETE_TOPIC entry only: a delete is applied at commit."""
        return self.journal.append(EPOCH, EntryKind.DELETE_TOPIC, topic=topic)

    def restart(self):
        self.journal.close()
        self.log.close()
        self.log = Log(self.data_dir, self.config)
        self.journal = Journal(self.data_dir / "@replication")

    def close(self):
        self.journal.close()
        self.log.close()

    def values(self, topic, partition) -> list[bytes]:
        part = self.log.partition(topic, partition)
        data = part.read_bytes(part.log_start_offset, 10**7)
        return [value for _, view in iter_batches(data) for _, value in iter_records(view)]

    def ends(self) -> dict[tuple[str, int], int]:
        return {(topic, p): self.log.partition(topic, p).log_end_offset
                for topic, count in self.log.topics().items() for p in range(count)}

    def snapshot(self):
        return self.journal.entries(), self.log.topics(), self.ends()


@pytest.fixture
def broker(tmp_path):
    opened = Broker(tmp_path / "data")
    yield opened
    opened.close()


def run(broker, commit=0):
    """Reconcile after a restart, then check that a second run changes nothing."""
    broker.restart()
    report = reconcile(broker.journal, broker.log, commit)
    after = broker.snapshot()
    again = reconcile(broker.journal, broker.log, commit)
    assert not again.changed, again
    assert broker.snapshot() == after
    broker.restart()  # what reconcile did is on disk, not only in memory
    assert broker.snapshot() == after
    assert not reconcile(broker.journal, broker.log, commit).changed
    return report


def test_agreeing_journal_and_data_change_nothing(broker):
    broker.create("a", 2)
    broker.produce("a", 0, b"x")
    broker.produce("a", 1, b"y", b"z")
    before = broker.snapshot()
    report = run(broker, commit=3)
    assert not report.changed
    assert report.journal_end == report.journal_end_before == 3
    assert broker.snapshot() == before


def test_empty_journal_and_empty_data_directory(broker):
    assert not run(broker).changed


def test_journal_ahead_of_data_is_cut_at_the_first_missing_batch(broker):
    broker.create("a", 2)
    broker.produce("a", 0, b"a0")
    broker.produce("a", 1, b"a1")
    missing = broker.journal_only("a", 0, b"lost")
    broker.produce("a", 1, b"after")  # bytes present, but its entry follows the hole
    report = run(broker)
    assert report.entries_cut == 2
    assert broker.journal.end == missing.index
    assert broker.values("a", 0) == [b"a0"]
    assert broker.values("a", 1) == [b"a1"]
    assert report.partitions_truncated == [TruncatedPartition("a", 1, 2, 1)]


def test_data_ahead_of_journal_is_truncated(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"kept")
    broker.produce("a", 0, b"no entry", b"for these", journaled=False)
    report = run(broker)
    assert report.entries_cut == 0
    assert report.partitions_truncated == [TruncatedPartition("a", 0, 3, 1)]
    assert broker.values("a", 0) == [b"kept"]


def test_data_without_any_entry_is_truncated_to_zero(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"x", journaled=False)
    run(broker)
    assert broker.ends() == {("a", 0): 0}


def test_topic_without_a_create_entry_is_deleted(broker):
    broker.create("a", 1)
    broker.create("ghost", 2, journaled=False)
    broker.produce("ghost", 1, b"x", journaled=False)
    report = run(broker)
    assert report.topics_deleted == ["ghost"]
    assert broker.log.topics() == {"a": 1}


def test_committed_delete_not_yet_applied_is_applied(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"x")
    delete = broker.delete("a")
    report = run(broker, commit=delete.index + 1)
    assert report.topics_deleted == ["a"]
    assert report.entries_cut == 0
    assert broker.log.topics() == {}


def test_uncommitted_delete_keeps_the_topic(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"x")
    delete = broker.delete("a")
    report = run(broker, commit=delete.index)
    assert not report.changed
    assert broker.values("a", 0) == [b"x"]


def test_topic_recreated_after_a_committed_delete(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"old", b"old")
    delete = broker.delete("a")
    broker.log.delete_topic("a")  # applied at commit
    broker.create("a", 1)
    broker.produce("a", 0, b"new")
    report = run(broker, commit=delete.index + 1)
    assert not report.changed
    assert broker.values("a", 0) == [b"new"]


def test_journaled_topic_missing_from_the_data_directory_is_created(broker):
    broker.create("a", 3)
    broker.log.delete_topic("a")  # say the rename never reached the disk
    report = run(broker)
    assert report.topics_created == ["a"]
    assert broker.log.topics() == {"a": 3}


def test_missing_topic_with_batches_cuts_the_journal_then_is_created_empty(broker):
    broker.create("a", 1)
    first = broker.produce("a", 0, b"x")
    broker.produce("a", 0, b"y")
    broker.log.delete_topic("a")
    report = run(broker)
    assert broker.journal.end == first.index
    assert report.topics_created == ["a"]
    assert broker.ends() == {("a", 0): 0}


def test_topic_with_another_partition_count_is_replaced(broker):
    broker.journal.append(EPOCH, EntryKind.CREATE_TOPIC, topic="a", partitions=3)
    broker.journal.append(EPOCH, EntryKind.BATCH, topic="a", partition=2, base_offset=0,
                          record_count=1, batch_bytes=len(batch(b"x")))
    broker.log.create_topic("a", 2)  # another incarnation of the name
    broker.log.partition("a", 0).append(batch(b"other"))
    report = run(broker)
    assert broker.journal.end == 1
    assert report.topics_deleted == ["a"] and report.topics_created == ["a"]
    assert broker.ends() == {("a", 0): 0, ("a", 1): 0, ("a", 2): 0}


def test_diverging_batches_at_the_same_offsets_are_cut(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"same")
    entry = broker.journal_only("a", 0, b"one batch", b"of two")
    # The partition holds two batches of one record where the journal says one of two.
    broker.log.partition("a", 0).append(batch(b"other"))
    broker.log.partition("a", 0).append(batch(b"history"))
    report = run(broker)
    assert broker.journal.end == entry.index
    assert report.partitions_truncated == [TruncatedPartition("a", 0, 3, 1)]
    assert broker.values("a", 0) == [b"same"]


def test_batch_straddling_the_expected_end_goes_and_the_journal_follows(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"k")
    entry = broker.journal_only("a", 0, b"one")
    broker.log.partition("a", 0).append(batch(b"three", b"record", b"batch"))
    run(broker)
    assert broker.journal.end == entry.index
    assert broker.values("a", 0) == [b"k"]


def test_sigkill_during_a_follower_truncation_ends_consistent(broker):
    """The follower truncates data first (partitions, then created topics), then the journal:
    killed after the data, before the journal."""
    broker.create("a", 2)
    broker.produce("a", 0, b"a0")
    broker.produce("a", 1, b"a1")
    end = broker.journal.end  # the divergence point
    broker.produce("a", 0, b"doomed")
    broker.create("b", 1)
    broker.produce("b", 0, b"doomed")
    broker.produce("a", 1, b"doomed", b"too")
    broker.log.partition("a", 0).truncate_to(1)
    broker.log.partition("a", 1).truncate_to(1)
    broker.log.delete_topic("b")
    report = run(broker)
    assert broker.journal.end == end
    assert broker.log.topics() == {"a": 2}
    assert broker.values("a", 0) == [b"a0"] and broker.values("a", 1) == [b"a1"]
    assert report.topics_deleted == [] and report.topics_created == []


def test_sigkill_between_two_partition_truncations_ends_consistent(broker):
    broker.create("a", 2)
    broker.produce("a", 0, b"a0")
    broker.produce("a", 1, b"a1")
    end = broker.journal.end
    broker.produce("a", 1, b"doomed")  # this partition was not truncated yet
    broker.produce("a", 0, b"doomed")
    broker.produce("a", 1, b"doomed")
    broker.log.partition("a", 0).truncate_to(1)
    report = run(broker)
    assert broker.journal.end == end + 1  # the a/1 batch before the a/0 hole survives
    assert broker.values("a", 0) == [b"a0"]
    assert broker.values("a", 1) == [b"a1", b"doomed"]
    assert report.partitions_truncated == [TruncatedPartition("a", 1, 3, 2)]


def test_sigkill_after_created_topic_deleted_keeps_the_create_entry_consistent(broker):
    broker.create("a", 1)
    end = broker.journal.end
    broker.create("b", 1)
    broker.produce("b", 0, b"doomed")
    broker.log.delete_topic("b")  # the truncation deleted b, then the broker died
    report = run(broker)
    # The BATCH is cut; the CREATE before it survives and b comes back empty. The journal
    # still diverges from the leader's, which the next fetch truncates properly.
    assert broker.journal.end == end + 1
    assert report.topics_created == ["b"]
    assert broker.ends() == {("a", 0): 0, ("b", 0): 0}


def test_internal_topic_is_never_deleted_or_created_but_is_truncated(broker):
    broker.log.create_topic("__offsets", 1)  # created by the broker at start, no CREATE entry
    broker.produce("__offsets", 0, b"c0")
    broker.produce("__offsets", 0, b"c1", journaled=False)
    report = run(broker)
    assert broker.log.topics() == {"__offsets": 1}
    assert broker.values("__offsets", 0) == [b"c0"]
    assert report.partitions_truncated == [TruncatedPartition("__offsets", 0, 2, 1)]


def test_missing_internal_topic_with_batches_cuts_the_journal(broker):
    broker.log.create_topic("__offsets", 1)
    broker.produce("__offsets", 0, b"c0")
    broker.log.delete_topic("__offsets")
    report = run(broker)
    assert broker.journal.end == 0
    assert broker.log.topics() == {} and report.topics_created == []


def test_batches_removed_by_retention_need_no_bytes(tmp_path):
    config = LogConfig(segment_bytes_max=4096, index_interval_bytes=256, batch_bytes_max=2048,
                       retention_bytes=1)
    broker = Broker(tmp_path / "data", config)
    try:
        broker.create("a", 1)
        for i in range(30):
            broker.produce("a", 0, b"%d" % i + b"v" * 400)
        assert broker.log.partition("a", 0).apply_retention(now_ms=0) > 0
        start = broker.log.partition("a", 0).log_start_offset
        assert start > 0
        report = run(broker)
        assert not report.changed
        assert broker.log.partition("a", 0).log_start_offset == start
        assert broker.ends() == {("a", 0): 30}
    finally:
        broker.close()


def test_skipped_entries_need_no_bytes_but_bound_the_partition(broker):
    broker.create("a", 2)
    broker.journal.append(EPOCH, EntryKind.SKIPPED, topic="a", partition=0, base_offset=0,
                          record_count=5)
    broker.journal.append(EPOCH, EntryKind.SKIPPED, topic="a", partition=1, base_offset=0,
                          record_count=1)
    broker.produce("a", 1, b"x", b"y", journaled=False)
    report = run(broker)
    assert report.entries_cut == 0
    assert report.partitions_truncated == [TruncatedPartition("a", 1, 2, 0)]


def test_cutting_committed_entries_is_logged_as_an_error(broker, caplog):
    broker.create("a", 1)
    entry = broker.journal_only("a", 0, b"lost")
    with caplog.at_level(logging.ERROR):
        run(broker, commit=entry.index + 1)
    assert broker.journal.end == entry.index
    assert "cutting committed entries" in caplog.text


def test_entries_of_a_deleted_topic_need_no_bytes(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"x")
    delete = broker.delete("a")
    broker.log.delete_topic("a")
    report = run(broker, commit=delete.index + 1)
    assert not report.changed
    assert broker.journal.entry(1).kind is EntryKind.BATCH


def test_report_counts(broker):
    broker.create("a", 1)
    broker.produce("a", 0, b"x")
    broker.journal_only("a", 0, b"lost")
    broker.create("ghost", 1, journaled=False)
    report = run(broker)
    assert (report.journal_end_before, report.journal_end, report.entries_cut) == (3, 2, 1)
    assert report.topics_deleted == ["ghost"] and report.changed


def test_follower_style_entries_reconcile_the_same(broker):
    """Entries copied with append_replica (as a follower does) are reconciled alike."""
    broker.journal.set_leading_epoch(None)
    broker.journal.append_replica(JournalEntry(0, 2, EntryKind.NOOP))
    broker.journal.append_replica(JournalEntry(1, 2, EntryKind.CREATE_TOPIC, "a",
                                               partitions=1))
    broker.log.create_topic("a", 1)
    data = batch(b"x")
    broker.log.partition("a", 0).append(data)
    broker.journal.append_replica(JournalEntry(2, 2, EntryKind.BATCH, "a", 0, 0, 1,
                                               batch_bytes=len(data)))
    assert not run(broker, commit=3).changed
