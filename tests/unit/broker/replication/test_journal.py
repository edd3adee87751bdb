"""Journal: append and read back, recovery of damaged files, the epoch cache, fencing."""

import logging
import os
import struct
import threading

import crc32c
import pytest

from common.kaska.errors import NotLeaderError
from services.broker.replication.errors import (
    CorruptJournalError,
    InvalidJournalEntryError,
    JournalClosedError,
    JournalEpochError,
    JournalGapError,
)
from services.broker.replication.journal import NO_EPOCH, Journal
from services.broker.replication.journal_record import (
    FILE_HEADER_BYTES,
    JOURNAL_FILE,
    JournalEntry,
    encode_entry,
)
from services.broker.replication.wire.replica_fetch import EntryKind


@pytest.fixture
def directory(tmp_path):
    return tmp_path / "@replication"


@pytest.fixture
def journal(directory):
    opened = Journal(directory)
    yield opened
    opened.close()


def batch_entry(index, epoch, topic="t", partition=0, base_offset=0, record_count=1,
                batch_bytes=100):
    return JournalEntry(index, epoch, EntryKind.BATCH, topic, partition, base_offset,
                        record_count, batch_bytes=batch_bytes)


def fill(journal, epochs):
    """One BATCH entry per item of `epochs`, appended as a follower would."""
    for epoch in epochs:
        end = journal.end
        journal.append_replica(batch_entry(end, epoch, base_offset=end))


def reopen(journal, directory):
    journal.close()
    return Journal(directory)


def record_positions(journal):
    """Byte position of every record in the file, and the file size."""
    positions = [FILE_HEADER_BYTES]
    for entry in journal.entries():
        positions.append(positions[-1] + len(encode_entry(entry)))
    return positions


# -- append and read back ----------------------------------------------------------------


def test_new_journal_is_empty_with_a_header(journal, directory):
    assert (journal.end, journal.last_epoch, journal.epochs()) == (0, 0, ())
    assert (directory / JOURNAL_FILE).read_bytes() == b"KJNL\x00\x01\x00\x00"


def test_append_read_back_and_reopen(journal, directory):
    journal.set_leading_epoch(3)
    entries = [
        journal.append(3, EntryKind.NOOP),
        journal.append(3, EntryKind.CREATE_TOPIC, topic="flights", partitions=4),
        journal.append(3, EntryKind.BATCH, topic="flights", partition=2, base_offset=0,
                       record_count=7, batch_bytes=321),
        journal.append(3, EntryKind.SKIPPED, topic="flights", partition=1, base_offset=0,
                       record_count=10),
        journal.append(3, EntryKind.DELETE_TOPIC, topic="flights"),
    ]
    assert [entry.index for entry in entries] == [0, 1, 2, 3, 4]
    assert entries[2].end_offset == 7
    assert journal.entries() == entries
    assert journal.entries(1, 3) == entries[1:3]
    assert journal.entry(4) == entries[4]
    journal = reopen(journal, directory)
    try:
        assert journal.entries() == entries
        assert (journal.end, journal.last_epoch, journal.epochs()) == (5, 3, ((3, 0),))
        assert all(isinstance(entry.kind, EntryKind) for entry in journal.entries())
    finally:
        journal.close()


def test_entry_out_of_range_and_slices_clamp(journal):
    fill(journal, [1, 1])
    with pytest.raises(IndexError):
        journal.entry(2)
    with pytest.raises(IndexError):
        journal.entry(-1)
    assert journal.entries(1, 99) == [journal.entry(1)]
    assert journal.entries(5) == []


def test_topic_of_249_bytes_is_kept_and_longer_refused(journal, directory):
    journal.append_replica(JournalEntry(0, 1, EntryKind.CREATE_TOPIC, "x" * 249, partitions=1))
    with pytest.raises(InvalidJournalEntryError):
        journal.append_replica(JournalEntry(1, 1, EntryKind.CREATE_TOPIC, "x" * 250,
                                            partitions=1))
    journal = reopen(journal, directory)
    try:
        assert journal.entry(0).topic == "x" * 249 and journal.end == 1
    finally:
        journal.close()


@pytest.mark.parametrize("fields", [
    {"partition": -1}, {"partition": 2**32}, {"record_count": 2**32}, {"base_offset": -1},
    {"batch_bytes": -5}, {"partitions": 2**32},
])
def test_fields_out_of_range_are_refused_and_nothing_is_written(journal, directory, fields):
    size_bytes = (directory / JOURNAL_FILE).stat().st_size
    journal.set_leading_epoch(1)
    with pytest.raises(InvalidJournalEntryError):
        journal.append(1, EntryKind.BATCH, topic="t", **fields)
    assert journal.end == 0
    assert (directory / JOURNAL_FILE).stat().st_size == size_bytes


def test_unknown_kind_is_refused():
    with pytest.raises(InvalidJournalEntryError):
        JournalEntry(0, 1, 9)
    assert JournalEntry(0, 1, 3).kind is EntryKind.BATCH


# -- the epoch cache and end_of_epoch -----------------------------------------------------


def test_epoch_cache_follows_the_entries(journal, directory):
    fill(journal, [1, 1, 2, 5, 5, 5, 7])
    assert journal.epochs() == ((1, 0), (2, 2), (5, 3), (7, 6))
    assert journal.last_epoch == 7
    journal = reopen(journal, directory)
    try:
        assert journal.epochs() == ((1, 0), (2, 2), (5, 3), (7, 6))
    finally:
        journal.close()


@pytest.mark.parametrize(("asked", "answer"), [
    (0, (NO_EPOCH, 0)),  # no epoch <= 0 has entries
    (1, (1, 2)),
    (2, (2, 3)),
    (3, (2, 3)),  # epoch 3 has no entries: the largest below it, with its end
    (4, (2, 3)),
    (5, (5, 6)),
    (6, (5, 6)),
    (7, (7, 7)),  # the last epoch ends at `end`
    (99, (7, 7)),
])
def test_end_of_epoch(journal, asked, answer):
    fill(journal, [1, 1, 2, 5, 5, 5, 7])
    assert journal.end_of_epoch(asked) == answer


def test_end_of_epoch_of_an_empty_journal(journal):
    assert journal.end_of_epoch(0) == (NO_EPOCH, 0)
    assert journal.end_of_epoch(9) == (NO_EPOCH, 0)


def test_epoch_zero_entries_are_an_epoch_of_their_own(journal):
    fill(journal, [0, 0, 1])
    assert journal.epochs() == ((0, 0), (1, 2))
    assert journal.end_of_epoch(0) == (0, 2)


# -- truncation ----------------------------------------------------------------------------


def test_truncate_then_reopen(journal, directory):
    fill(journal, [1, 1, 2, 2, 3])
    kept = journal.entries(0, 3)
    journal.truncate(3)
    assert (journal.end, journal.epochs(), journal.last_epoch) == (3, ((1, 0), (2, 2)), 2)
    assert journal.entries() == kept
    assert (directory / JOURNAL_FILE).stat().st_size == record_positions(journal)[-1]
    fill(journal, [4])  # appends go on right after the cut
    journal = reopen(journal, directory)
    try:
        assert journal.entries()[:3] == kept
        assert journal.entry(3).epoch == 4
        assert journal.epochs() == ((1, 0), (2, 2), (4, 3))
    finally:
        journal.close()


def test_truncate_to_zero_and_beyond_the_end(journal):
    fill(journal, [1, 2])
    journal.truncate(5)
    assert journal.end == 2
    journal.truncate(0)
    assert (journal.end, journal.epochs(), journal.last_epoch) == (0, (), 0)
    with pytest.raises(ValueError):
        journal.truncate(-1)


# -- recovery --------------------------------------------------------------------------------


@pytest.mark.parametrize("cut_bytes", [1, 4, 8, 20])
def test_torn_tail_is_cut(journal, directory, caplog, cut_bytes):
    fill(journal, [1, 1, 1])
    positions = record_positions(journal)
    expected = journal.entries(0, 2)
    journal.close()
    os.truncate(directory / JOURNAL_FILE, positions[3] - cut_bytes)
    with caplog.at_level(logging.WARNING):
        reopened = Journal(directory)
    try:
        assert reopened.entries() == expected
        assert "torn" in caplog.text
        assert (directory / JOURNAL_FILE).stat().st_size == positions[2]
        fill(reopened, [1])  # the cut file takes appends again
        assert reopened.end == 3
    finally:
        reopened.close()
    assert Journal(directory).end == 3


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x01]))


@pytest.mark.parametrize("damaged", [0, 2, 3])
def test_corrupt_crc_before_the_last_record_refuses_to_start(journal, directory, damaged):
    """A bad CRC with whole records after it is corruption, not a torn tail: the
    journal refuses to open, names the position, and leaves the file as it was (record 0
    included: cutting there would empty the journal and reconcile would delete every topic)."""
    fill(journal, [1, 1, 2, 2, 2])
    positions = record_positions(journal)
    journal.close()
    path = directory / JOURNAL_FILE
    flip_byte(path, positions[damaged] + 8 + 20)  # inside the payload
    before = path.read_bytes()
    with pytest.raises(CorruptJournalError, match=f"at byte {positions[damaged]} "):
        Journal(directory)
    assert path.read_bytes() == before


def test_corrupt_length_before_the_last_record_refuses_to_start(journal, directory):
    fill(journal, [1] * 40)  # more than one record's worth of bytes after the damage
    positions = record_positions(journal)
    journal.close()
    path = directory / JOURNAL_FILE
    with open(path, "r+b") as f:
        f.seek(positions[1])
        f.write(struct.pack(">I", 10**6))
    with pytest.raises(CorruptJournalError, match="payload length"):
        Journal(directory)


def test_torn_write_of_the_last_record_is_cut(journal, directory, caplog):
    """A last record whose bytes did not all reach the disk (bad CRC, full length) is a torn
    tail: cut, with a warning."""
    fill(journal, [1, 1, 2])
    positions = record_positions(journal)
    expected = journal.entries(0, 2)
    journal.close()
    flip_byte(directory / JOURNAL_FILE, positions[2] + 8 + 20)
    with caplog.at_level(logging.WARNING):
        reopened = Journal(directory)
    try:
        assert reopened.entries() == expected
        assert "crc32c" in caplog.text
        assert (directory / JOURNAL_FILE).stat().st_size == positions[2]
    finally:
        reopened.close()


def test_a_tail_of_zeros_is_cut(journal, directory, caplog):
    """Space the file system allocated but never wrote (a machine crash) reads as zeros, over
    several records' worth: a torn tail, however long."""
    fill(journal, [1, 1])
    positions = record_positions(journal)
    expected = journal.entries()
    journal.close()
    with open(directory / JOURNAL_FILE, "ab") as f:
        f.write(bytes(4096))
    with caplog.at_level(logging.WARNING):
        reopened = Journal(directory)
    try:
        assert reopened.entries() == expected
        assert "out of bounds" in caplog.text
        assert (directory / JOURNAL_FILE).stat().st_size == positions[2]
    finally:
        reopened.close()


def write_records(directory, entries):
    """A journal file holding exactly these entries, however inconsistent."""
    data = b"KJNL\x00\x01\x00\x00" + b"".join(encode_entry(entry) for entry in entries)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / JOURNAL_FILE).write_bytes(data)


@pytest.mark.parametrize("indexes", [
    [0, 1, 3, 4],  # a gap
    [0, 1, 1],  # a repeat
    [1, 2],  # the first entry must be 0
])
def test_non_dense_index_refuses_to_start(directory, indexes):
    """A whole record (good CRC) out of place is no torn write: corruption, even at the end."""
    write_records(directory, [batch_entry(index, 1) for index in indexes])
    with pytest.raises(CorruptJournalError, match="where .* was expected"):
        Journal(directory)


def test_epoch_going_back_refuses_to_start(directory):
    write_records(directory, [batch_entry(0, 2), batch_entry(1, 3), batch_entry(2, 2)])
    with pytest.raises(CorruptJournalError, match="epoch 2 after epoch 3"):
        Journal(directory)


def test_unknown_kind_on_disk_refuses_to_start(directory):
    good = encode_entry(batch_entry(0, 1))
    bad = bytearray(encode_entry(batch_entry(1, 1)))
    bad[8 + 12] = 77  # the kind byte
    struct.pack_into(">I", bad, 4, crc32c.crc32c(bytes(bad[8:])))
    directory.mkdir(parents=True)
    (directory / JOURNAL_FILE).write_bytes(b"KJNL\x00\x01\x00\x00" + good + bytes(bad))
    with pytest.raises(CorruptJournalError, match="77"):
        Journal(directory)


@pytest.mark.parametrize("length", [0, 5, 10**6])
def test_impossible_length_ends_the_journal(directory, length):
    good = encode_entry(batch_entry(0, 1))
    directory.mkdir(parents=True)
    (directory / JOURNAL_FILE).write_bytes(b"KJNL\x00\x01\x00\x00" + good
                                           + struct.pack(">II", length, 0) + bytes(64))
    journal = Journal(directory)
    try:
        assert journal.end == 1
    finally:
        journal.close()


@pytest.mark.parametrize("content", [b"", b"KJN", b"XXXX\x00\x01\x00\x00", b"KJNL\x00\x09\x00\x00"])
def test_a_file_that_is_no_journal_is_refused(directory, content):
    directory.mkdir(parents=True)
    (directory / JOURNAL_FILE).write_bytes(content)
    with pytest.raises(CorruptJournalError):
        Journal(directory)
    assert (directory / JOURNAL_FILE).read_bytes() == content  # never "repaired"


def test_leftover_tmp_file_is_removed(directory):
    directory.mkdir(parents=True)
    (directory / (JOURNAL_FILE + ".tmp")).write_bytes(b"half")
    journal = Journal(directory)
    journal.close()
    assert sorted(path.name for path in directory.iterdir()) == [JOURNAL_FILE]


def test_a_large_journal_reads_back_across_read_chunks(journal, directory):
    count = 30_000  # ~1.6 MB: more than one recovery read chunk
    for index in range(count):
        journal.append_replica(batch_entry(index, 1 + index // 10_000, base_offset=index))
    journal = reopen(journal, directory)
    try:
        assert journal.end == count
        assert journal.epochs() == ((1, 0), (2, 10_000), (3, 20_000))
        assert journal.entry(count - 1).base_offset == count - 1
    finally:
        journal.close()


# -- fencing and the follower's append ---------------------------------------------------


def test_append_needs_the_leading_epoch(journal):
    with pytest.raises(NotLeaderError):
        journal.append(1, EntryKind.NOOP)  # leads nothing yet
    journal.set_leading_epoch(2)
    with pytest.raises(NotLeaderError):
        journal.append(1, EntryKind.NOOP)
    with pytest.raises(NotLeaderError):
        journal.append(3, EntryKind.NOOP)
    assert journal.append(2, EntryKind.NOOP).index == 0
    journal.set_leading_epoch(None)  # stepped down
    with pytest.raises(NotLeaderError):
        journal.append(2, EntryKind.BATCH, topic="t", record_count=1, batch_bytes=64)
    assert journal.end == 1


def test_leading_an_epoch_below_the_last_one_is_refused(journal):
    fill(journal, [5])
    journal.set_leading_epoch(4)
    with pytest.raises(JournalEpochError):
        journal.append(4, EntryKind.NOOP)
    assert journal.end == 1


def test_append_replica_must_follow_the_end(journal):
    fill(journal, [1, 1])
    for index in (0, 1, 3):
        with pytest.raises(JournalGapError):
            journal.append_replica(batch_entry(index, 1))
    assert journal.end == 2


def test_append_replica_refuses_an_epoch_going_back(journal):
    fill(journal, [3])
    with pytest.raises(JournalEpochError):
        journal.append_replica(batch_entry(1, 2))
    journal.append_replica(batch_entry(1, 3))
    journal.append_replica(batch_entry(2, 4))
    assert journal.epochs() == ((3, 0), (4, 2))


def test_concurrent_leader_appends_stay_dense(journal, directory):
    journal.set_leading_epoch(1)

    def produce():
        for _ in range(500):
            journal.append(1, EntryKind.BATCH, topic="t", record_count=1, batch_bytes=64)

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [entry.index for entry in journal.entries()] == list(range(2000))
    journal = reopen(journal, directory)
    try:
        assert journal.end == 2000
    finally:
        journal.close()


# -- durability and lifetime ---------------------------------------------------------------


def test_flush_and_close(journal):
    fill(journal, [1])
    journal.flush()
    journal.close()
    journal.close()  # idempotent
    assert journal.closed and journal.end == 1
    with pytest.raises(JournalClosedError):
        fill(journal, [1])
    with pytest.raises(JournalClosedError):
        journal.flush()
    with pytest.raises(JournalClosedError):
        journal.truncate(0)


# -- topic ids -------------------------------------------------------------------------------


def test_entries_name_the_incarnation_of_their_topic(journal, directory):
    """Each CREATE_TOPIC starts an incarnation named by its (epoch, index); later entries of
    the topic carry it, across a delete and re-create, a truncation and a reopen."""
    journal.set_leading_epoch(2)
    first = journal.append(2, EntryKind.CREATE_TOPIC, topic="t", partitions=1)
    batch = journal.append(2, EntryKind.BATCH, topic="t", record_count=1, batch_bytes=10)
    delete = journal.append(2, EntryKind.DELETE_TOPIC, topic="t")
    second = journal.append(2, EntryKind.CREATE_TOPIC, topic="t", partitions=1)
    later = journal.append(2, EntryKind.BATCH, topic="t", record_count=1, batch_bytes=10)
    internal = journal.append(2, EntryKind.BATCH, topic="__offsets", record_count=1,
                              batch_bytes=10)
    assert first.topic_id == batch.topic_id == delete.topic_id == (2, 0)
    assert second.topic_id == later.topic_id == (2, 3)
    assert internal.topic_id is None and journal.incarnation("t") == (2, 3)
    journal = reopen(journal, directory)
    try:
        assert [entry.topic_id for entry in journal.entries()] == [
            (2, 0), (2, 0), (2, 0), (2, 3), (2, 3), None]
        journal.truncate(3)  # the re-create is gone: the journal's t is the first again
        assert journal.incarnation("t") == (2, 0)
        stored = journal.append_replica(JournalEntry(3, 3, EntryKind.BATCH, "t", 0, 1, 1,
                                                     batch_bytes=10))
        assert stored.topic_id == (2, 0)
    finally:
        journal.close()
