import dataclasses
import errno
import logging
import os
import shutil
import struct
import tempfile
from pathlib import Path

import crc32c
import pytest

from common.kaska.errors import CorruptBatchError
from common.kaska.record_batch import parse_header
from services.broker.storage import segment as segment_module
from services.broker.storage.errors import CorruptSegmentError, StorageFullError
from services.broker.storage.offset_index import RELATIVE_OFFSET_MAX, OffsetIndex, index_path
from services.broker.storage.segment import DATA_START, LogSegment, copy_slices, log_path
from services.broker.storage.time_index import TimeIndex, time_index_path

from .batches import SMALL, batch, records, sized_batch


def append(segment: LogSegment, data: bytes, epoch: int = 0) -> int:
    region = segment.reserve(len(data))
    region[:] = data
    del region
    header = segment.validate_reservation()
    base = segment.next_offset
    segment.commit(header, base, epoch)
    return base


def read_all(segment: LogSegment) -> bytes:
    return segment.read_bytes(DATA_START, segment.end_position - DATA_START)


@pytest.fixture
def segment(tmp_path):
    seg = LogSegment.create(tmp_path, 1000, SMALL)
    yield seg
    seg.close()


def test_new_file_is_preallocated_with_magic_and_base_offset(segment, tmp_path):
    path = log_path(tmp_path, 1000)
    assert path.name == "00000000000000001000.log"
    assert os.path.getsize(path) == SMALL.segment_bytes_max
    head = path.read_bytes()[:DATA_START]
    assert head[:4] == b"KASK"
    assert struct.unpack(">HHq", head[4:]) == (1, 0, 1000)
    assert segment.is_empty and segment.end_position == DATA_START


def test_append_stamps_offsets_and_epoch_in_place(segment):
    assert append(segment, batch(b"a", b"b"), epoch=7) == 1000
    assert append(segment, batch(b"c")) == 1002
    data = read_all(segment)
    assert records(data) == [(1000, b"a"), (1001, b"b"), (1002, b"c")]
    assert parse_header(data).leader_epoch == 7
    assert segment.next_offset == 1003


def test_corrupt_fill_raises_and_discard_zeroes_the_region(segment, tmp_path):
    bad = bytearray(batch(b"payload"))
    bad[-1] ^= 0xFF
    region = segment.reserve(len(bad))
    region[:] = bad
    del region
    with pytest.raises(CorruptBatchError):
        segment.validate_reservation()
    segment.discard()
    assert segment.is_empty
    assert log_path(tmp_path, 1000).read_bytes()[DATA_START:DATA_START + len(bad)] == bytes(
        len(bad))


def test_length_must_match_the_reserved_region(segment):
    data = batch(b"abc")
    region = segment.reserve(len(data) + 4)
    region[:len(data)] = data
    del region
    with pytest.raises(CorruptBatchError, match="frame carried"):
        segment.validate_reservation()
    segment.discard()


@pytest.mark.parametrize("claimed", [1000, 2])
def test_record_count_bounded_by_batch_size(segment, claimed):
    """A 65-byte batch holds one 1-byte record: it cannot claim 1000, nor even 2 (its CRC
    made right again, so the bound alone refuses it)."""
    data = bytearray(batch(b"x"))
    struct.pack_into(">I", data, 24, claimed)
    struct.pack_into(">I", data, 16, crc32c.crc32c(memoryview(data)[20:]))
    region = segment.reserve(len(data))
    region[:] = data
    del region
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        segment.validate_reservation()
    segment.discard()


def test_read_slice_whole_batches_and_at_least_one(segment):
    for i in range(10):
        append(segment, sized_batch(100, i))
    piece, next_offset = segment.read_slice(1003, 250, 10**9, at_least_one=True)
    assert (piece.position, piece.nbytes, next_offset) == (DATA_START + 300, 200, 1005)
    piece, next_offset = segment.read_slice(1003, 50, 10**9, at_least_one=True)
    assert (piece.nbytes, next_offset) == (100, 1004)
    assert segment.read_slice(1003, 50, 10**9, at_least_one=False) is None
    piece, next_offset = segment.read_slice(1003, 10**6, 1006, at_least_one=True)
    assert (piece.nbytes, next_offset) == (300, 1006)
    assert segment.read_slice(1010, 10**6, 10**9, at_least_one=True) is None


def test_index_gets_an_entry_every_interval(segment):
    for i in range(20):
        append(segment, sized_batch(100, i))
    entries = segment._index.entries()
    # 256-byte interval, 100-byte batches: every third batch after the first is indexed
    assert entries[:3] == [(3, DATA_START + 300), (6, DATA_START + 600), (9, DATA_START + 900)]


def test_seal_trims_and_reopen_recovers(segment, tmp_path):
    for i in range(5):
        append(segment, sized_batch(100, i))
    segment.seal()
    assert os.path.getsize(log_path(tmp_path, 1000)) == DATA_START + 500
    reopened = LogSegment.open(tmp_path, 1000, SMALL)
    assert (reopened.next_offset, reopened.end_position) == (1005, DATA_START + 500)
    assert records(read_all(reopened)) == records(read_all(segment))
    reopened.close()


def _filled_segment(tmp_path, count=10):
    segment = LogSegment.create(tmp_path, 0, SMALL)
    for i in range(count):
        append(segment, sized_batch(100, i))
    segment.close()
    return log_path(tmp_path, 0)


def test_torn_tail_is_cut_and_zeroed(tmp_path, caplog):
    path = _filled_segment(tmp_path)
    whole = sized_batch(100, 99)
    with open(path, "r+b") as f:  # a crash in the middle of receiving an 11th batch
        f.seek(DATA_START + 1000)
        f.write(whole[:70])
    with caplog.at_level(logging.WARNING):
        segment = LogSegment.open(tmp_path, 0, SMALL)
    assert "valid data ends at byte 1016" in caplog.text
    segment.activate()
    assert segment.next_offset == 10
    assert path.read_bytes()[DATA_START + 1000:] == bytes(SMALL.segment_bytes_max - 1016)
    append(segment, sized_batch(100, 10))
    assert [o for o, _ in records(read_all(segment))] == list(range(11))
    segment.close()


def test_crc_flip_in_the_middle_cuts_there(tmp_path, caplog):
    path = _filled_segment(tmp_path)
    with open(path, "r+b") as f:
        f.seek(DATA_START + 450)  # inside batch 4
        byte = f.read(1)
        f.seek(DATA_START + 450)
        f.write(bytes([byte[0] ^ 0x01]))
    with caplog.at_level(logging.WARNING):
        segment = LogSegment.open(tmp_path, 0, SMALL)
    assert "CRC32C mismatch" in caplog.text
    assert (segment.next_offset, segment.end_position) == (4, DATA_START + 400)
    segment.close()


def crash_after_the_fill(segment: LogSegment, data: bytes) -> None:
    """Fill and validate a batch (its offset field poisoned), then die before commit or
    discard runs."""
    region = segment.reserve(len(data))
    region[:] = data
    del region
    segment.validate_reservation()
    segment._reservation = None
    segment._close_map()


def test_uncommitted_batch_is_never_recovered(tmp_path):
    """A fill that completed but was never committed (crash before the producer check) has
    its offset field poisoned, so recovery does not take it."""
    segment = LogSegment.create(tmp_path, 0, SMALL)
    crash_after_the_fill(segment, sized_batch(100))
    reopened = LogSegment.open(tmp_path, 0, SMALL)
    assert reopened.is_empty
    reopened.close()


def test_a_filled_batch_never_stamped_after_committed_ones_is_cut(tmp_path, caplog):
    """Three committed batches, then a fourth filled and validated (its offset field poisoned)
    but never committed: it passes its CRC (which does not cover the base offset), so only the
    base offset check tells recovery it is a torn tail. The next append takes its place."""
    segment = LogSegment.create(tmp_path, 0, SMALL)
    for i in range(3):
        append(segment, sized_batch(100, i))
    crash_after_the_fill(segment, batch(b"x", b"y", b"z"))
    with caplog.at_level(logging.WARNING):
        reopened = LogSegment.open(tmp_path, 0, SMALL)
    assert (reopened.next_offset, reopened.end_position) == (3, DATA_START + 300)
    assert "base offset -1, expected 3" in caplog.text
    reopened.activate()
    assert append(reopened, sized_batch(100, 3)) == 3
    assert [o for o, _ in records(read_all(reopened))] == [0, 1, 2, 3]
    reopened.close()


def test_missing_index_is_rebuilt(tmp_path, caplog):
    _filled_segment(tmp_path, count=20)
    expected = OffsetIndex.read_entries(index_path(tmp_path, 0))
    index_path(tmp_path, 0).unlink()
    with caplog.at_level(logging.WARNING):
        segment = LogSegment.open(tmp_path, 0, SMALL)
    assert "index missing" in caplog.text
    assert OffsetIndex.read_entries(index_path(tmp_path, 0)) == expected != []
    segment.close()


@pytest.mark.parametrize("garbage", [
    b"\x01\x02\x03",                                   # torn
    bytes.fromhex("00000009 00000010".replace(" ", "")),  # ordered, but inside batch 0
    bytes.fromhex("00000004 0000013c".replace(" ", "")),  # batch start, wrong offset
    bytes.fromhex("00000003 0000013c 00000013 000007ae".replace(" ", "")),  # inside the last
])
def test_garbage_index_is_rebuilt(tmp_path, garbage):
    _filled_segment(tmp_path, count=20)
    expected = OffsetIndex.read_entries(index_path(tmp_path, 0))
    index_path(tmp_path, 0).write_bytes(garbage)
    segment = LogSegment.open(tmp_path, 0, SMALL)
    assert OffsetIndex.read_entries(index_path(tmp_path, 0)) == expected
    assert segment.locate(13) == (DATA_START + 1300, 13)
    segment.close()


def test_index_entries_past_the_valid_end_are_dropped(tmp_path):
    path = _filled_segment(tmp_path, count=20)
    with open(path, "r+b") as f:
        f.truncate(DATA_START + 750)  # torn inside batch 7
    segment = LogSegment.open(tmp_path, 0, SMALL)
    assert segment.next_offset == 7
    assert OffsetIndex.read_entries(index_path(tmp_path, 0)) == [(3, DATA_START + 300),
                                                                (6, DATA_START + 600)]
    segment.close()


@pytest.mark.parametrize("content", [b"", b"KASK", b"NOPE" + bytes(100),
                                     b"KASK\x00\x09" + bytes(100)])
def test_non_segment_files_are_refused(tmp_path, content):
    log_path(tmp_path, 0).write_bytes(content)
    with pytest.raises(CorruptSegmentError):
        LogSegment.open(tmp_path, 0, SMALL)


def test_header_base_offset_must_match_the_name(tmp_path):
    LogSegment.create(tmp_path, 0, SMALL).close()
    os.rename(log_path(tmp_path, 0), log_path(tmp_path, 5))
    with pytest.raises(CorruptSegmentError, match="base offset 0"):
        LogSegment.open(tmp_path, 5, SMALL)


def test_truncate_to_cuts_index_and_reactivates(segment):
    for i in range(12):
        append(segment, sized_batch(100, i))
    segment.seal()
    segment.truncate_to(DATA_START + 500, 1005)
    assert segment.active and segment.next_offset == 1005
    assert all(pos < DATA_START + 500 for _, pos in segment._index.entries())
    append(segment, sized_batch(100, 77))
    assert [o for o, _ in records(read_all(segment))] == list(range(1000, 1006))


def test_read_slice_from_a_low_base_offset_stops_at_the_byte_bound(tmp_path):
    # Offsets and byte positions are different scales: at base 0 every offset lies below every
    # position, so a bound on one compared with the other would show.
    _filled_segment(tmp_path)
    segment = LogSegment.open(tmp_path, 0, SMALL)
    piece, next_offset = segment.read_slice(3, 250, 10**9, at_least_one=True)
    assert (piece.position, piece.nbytes, next_offset) == (DATA_START + 300, 200, 5)
    piece, next_offset = segment.read_slice(3, 250, 8, at_least_one=False)
    assert (piece.position, piece.nbytes, next_offset) == (DATA_START + 300, 200, 5)
    segment.close()


def test_a_clean_reopen_keeps_the_stored_index(tmp_path, caplog):
    _filled_segment(tmp_path, count=20)
    expected = OffsetIndex.read_entries(index_path(tmp_path, 0))
    inode = os.stat(index_path(tmp_path, 0)).st_ino
    with caplog.at_level(logging.WARNING):
        segment = LogSegment.open(tmp_path, 0, SMALL)
    assert segment.next_offset == 20 and len(expected) >= 3, "a segment with an index reopened"
    assert "rebuil" not in caplog.text
    assert os.stat(index_path(tmp_path, 0)).st_ino == inode, "the index file was not rewritten"
    assert OffsetIndex.read_entries(index_path(tmp_path, 0)) == expected
    segment.close()


def test_a_new_segment_file_is_readable_by_all_writable_by_the_owner_only(tmp_path):
    umask = os.umask(0o022)
    try:
        LogSegment.create(tmp_path, 0, SMALL).close()
    finally:
        os.umask(umask)
    assert os.stat(log_path(tmp_path, 0)).st_mode & 0o777 == 0o644


def test_the_index_keeps_its_interval_across_a_reopen(tmp_path):
    _filled_segment(tmp_path, count=10)
    segment = LogSegment.open(tmp_path, 0, SMALL)
    segment.activate()
    for i in range(10, 20):
        append(segment, sized_batch(100, i))
    assert segment.next_offset == 20
    # As in a segment never closed (test_index_gets_an_entry_every_interval): every third.
    assert [rel for rel, _ in segment._index.entries()] == [3, 6, 9, 12, 15, 18]
    segment.close()


def test_a_create_that_fails_before_the_file_is_opened_closes_no_descriptor(tmp_path,
                                                                             monkeypatch):
    def no_room(path, *_args):
        raise StorageFullError(path, OSError(errno.ENOSPC, "No space left on device"))

    closed: list[int] = []
    monkeypatch.setattr(OffsetIndex, "rewrite", no_room)
    # Recorded, not closed: a stray close would hit whatever file the process holds there.
    monkeypatch.setattr(os, "close", closed.append)
    with pytest.raises(StorageFullError):
        LogSegment.create(tmp_path, 0, SMALL)
    monkeypatch.undo()
    assert closed == [] and list(tmp_path.iterdir()) == []


def test_an_index_entry_at_the_valid_end_is_dropped_without_a_rebuild(tmp_path, caplog):
    path = _filled_segment(tmp_path, count=20)
    with open(path, "r+b") as f:
        f.truncate(DATA_START + 900)  # cut right before batch 9, which is indexed
    with caplog.at_level(logging.WARNING):
        segment = LogSegment.open(tmp_path, 0, SMALL)
    assert segment.next_offset == 9
    assert OffsetIndex.read_entries(index_path(tmp_path, 0)) == [(3, DATA_START + 300),
                                                                (6, DATA_START + 600)]
    assert "rebuil" not in caplog.text
    segment.close()


def test_the_index_of_a_segment_based_above_0_is_kept_or_rebuilt_relative_to_its_base(tmp_path,
                                                                                     caplog):
    # Index entries hold offsets relative to the segment's base: at base 0 relative and
    # absolute agree, so only a segment based elsewhere shows which one is stored.
    segment = LogSegment.create(tmp_path, 1000, SMALL)
    for i in range(20):
        append(segment, sized_batch(100, i))
    segment.close()
    expected = OffsetIndex.read_entries(index_path(tmp_path, 1000))
    assert expected[:2] == [(3, DATA_START + 300), (6, DATA_START + 600)]
    with caplog.at_level(logging.WARNING):
        LogSegment.open(tmp_path, 1000, SMALL).close()
    assert "rebuil" not in caplog.text, "a sound index is kept"
    index_path(tmp_path, 1000).unlink()
    reopened = LogSegment.open(tmp_path, 1000, SMALL)
    assert OffsetIndex.read_entries(index_path(tmp_path, 1000)) == expected
    assert reopened.locate(1013) == (DATA_START + 1300, 1013)
    reopened.close()


def test_a_segment_whose_index_is_gone_is_deleted_whole(tmp_path):
    # A restart on a full disk can leave a segment without its index file (the rebuild had
    # no room): deleting that segment must still remove its log.
    segment = LogSegment.create(tmp_path, 0, SMALL)
    append(segment, sized_batch(100, 0))
    index_path(tmp_path, 0).unlink()
    segment.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_batch_that_exactly_fills_the_segment_fits_and_the_file_keeps_its_size(tmp_path):
    segment = LogSegment.create(tmp_path, 0, SMALL)
    room = SMALL.segment_bytes_max - DATA_START
    append(segment, sized_batch(room // 2, 0))
    last = room - room // 2
    assert segment.fits(last) and not segment.fits(last + 1)
    append(segment, sized_batch(last, 1))
    assert segment.end_position == SMALL.segment_bytes_max
    assert os.path.getsize(log_path(tmp_path, 0)) == SMALL.segment_bytes_max, "nothing past it"
    segment.close()


def test_a_sealed_segment_reopens_without_a_warning(tmp_path, caplog):
    # Sealed, the file ends right after its last batch: a clean end, not a torn tail.
    segment = LogSegment.create(tmp_path, 0, SMALL)
    for i in range(5):
        append(segment, sized_batch(100, i))
    segment.seal()
    segment.close()
    assert os.path.getsize(log_path(tmp_path, 0)) == DATA_START + 500
    with caplog.at_level(logging.WARNING):
        reopened = LogSegment.open(tmp_path, 0, SMALL)
    assert reopened.next_offset == 5
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    reopened.close()


def test_a_segment_whose_log_file_is_gone_is_deleted_whole(tmp_path):
    segment = LogSegment.create(tmp_path, 0, SMALL)
    append(segment, sized_batch(100, 0))
    log_path(tmp_path, 0).unlink()
    segment.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_segment_is_active_until_sealed(tmp_path):
    segment = LogSegment.create(tmp_path, 0, SMALL)
    assert segment.active is True
    append(segment, sized_batch(100, 0))
    segment.seal()
    assert segment.active is False
    segment.close()


def cut_under_the_reader(segment: LogSegment, position: int, next_offset: int,
                         then_seal: bool) -> list[int]:
    """Make `segment.truncate_to(position, next_offset)` happen in the middle of a lock-free
    `read_slice`: right after the reader took its snapshot of the committed end and located its
    first batch, when it asks the index where to start the walk to its byte bound (the race a
    follower's truncation makes with a fetch). `then_seal`: the segment is also sealed (a roll
    right after the cut), so the file ends at the cut: what a reader sees while `activate`
    has cut the file and not yet extended it again. The list records when the cut happened."""
    cuts: list[int] = []
    real_lookup_position = segment._index.lookup_position

    def cut_then_look_up(target: int) -> tuple[int, int] | None:
        if not cuts:
            segment.truncate_to(position, next_offset)
            if then_seal:
                segment.seal()
            cuts.append(target)
        return real_lookup_position(target)

    segment._index.lookup_position = cut_then_look_up
    return cuts


@pytest.mark.parametrize("then_seal", [False, True],
                         ids=["cut-and-zeroed", "file-ends-at-the-cut"])
def test_a_reader_racing_a_truncation_gets_the_batches_before_the_cut_only(segment, then_seal):
    # Beyond the cut the reader meets zeros (a zero batch length) or the end of the file (a
    # short read): either means "no batch here", never a batch made of zeros or a crash.
    for i in range(3):
        append(segment, sized_batch(100, i))
    cuts = cut_under_the_reader(segment, DATA_START + 100, 1001, then_seal)
    piece, next_offset = segment.read_slice(1000, 250, 10**9, at_least_one=True)
    assert cuts == [DATA_START + 250], "the cut came between the reader's snapshot and walk"
    assert (piece.position, piece.nbytes, next_offset) == (DATA_START, 100, 1001)
    assert [offset for offset, _ in records(copy_slices([piece]))] == [1000]


def test_an_active_segment_reopens_without_a_warning(tmp_path, caplog):
    # Closed unsealed (a restart), the file goes on with zeros after its last batch: the valid
    # data ends cleanly at the first zero length field, not at a torn tail.
    path = _filled_segment(tmp_path, count=10)
    assert os.path.getsize(path) == SMALL.segment_bytes_max, "the file ends in zeros, unsealed"
    with caplog.at_level(logging.WARNING):
        reopened = LogSegment.open(tmp_path, 0, SMALL)
    assert (reopened.next_offset, reopened.end_position) == (10, DATA_START + 1000)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    reopened.close()


def test_an_empty_sealed_segment_reopens_empty(tmp_path):
    # Sealed before its first batch, the file is its header alone: a segment, not a torn one.
    segment = LogSegment.create(tmp_path, 1000, SMALL)
    segment.seal()
    segment.close()
    assert os.path.getsize(log_path(tmp_path, 1000)) == DATA_START
    reopened = LogSegment.open(tmp_path, 1000, SMALL)
    assert reopened.is_empty and reopened.end_position == DATA_START
    reopened.close()


def test_a_segment_based_past_the_relative_offset_range_fits_batches(tmp_path):
    # Only offsets relative to the segment's base are bounded (index entries hold them), so a
    # log whose offsets grew past 2**32 still appends to a new segment.
    base = RELATIVE_OFFSET_MAX + 1
    segment = LogSegment.create(tmp_path, base, SMALL)
    assert segment.fits(100)
    assert append(segment, sized_batch(100, 0)) == base
    assert segment.fits(100)
    segment.close()


def test_a_segment_fits_batches_until_its_next_relative_offset_passes_the_bound(tmp_path,
                                                                                 monkeypatch):
    # 2**32 records cannot be appended in a test: the bound is lowered to 3 instead.
    monkeypatch.setattr(segment_module, "RELATIVE_OFFSET_MAX", 3)
    segment = LogSegment.create(tmp_path, 1000, SMALL)
    for i in range(3):
        append(segment, sized_batch(100, i))
    assert segment.next_offset - segment.base_offset == 3
    assert segment.fits(100), "the next batch's relative offset, 3, is within the bound"
    append(segment, sized_batch(100, 3))
    assert not segment.fits(100), "the next batch's relative offset, 4, is past it"
    segment.close()


def test_a_sealed_segment_flushes_through_its_descriptor(tmp_path, monkeypatch):
    segment = LogSegment.create(tmp_path, 0, SMALL)
    append(segment, sized_batch(100, 0))
    segment.seal()
    synced: list[int] = []
    real_fsync = os.fsync

    def record_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record_fsync)
    segment.flush()
    assert segment.fd in synced
    segment.close()


def test_truncate_to_keeps_the_largest_timestamp_of_the_batches_it_keeps(segment):
    for i, timestamp_ms in enumerate([5_000, 9_000, 9_000, 7_000, 12_000]):
        append(segment, sized_batch(100, i, timestamp_ms=timestamp_ms))
    assert (segment.max_timestamp_ms, segment.max_timestamp_offset) == (12_000, 1004)
    segment.truncate_to(DATA_START + 400, 1004)
    assert (segment.max_timestamp_ms, segment.max_timestamp_offset) == (9_000, 1001)
    segment.truncate_to(DATA_START + 100, 1001)
    assert (segment.max_timestamp_ms, segment.max_timestamp_offset) == (5_000, 1000)


@pytest.fixture
def tmpfs_path():
    """A directory on tmpfs (/dev/shm), where reading a never-written page through a map
    allocates it: what a full disk turns into a SIGBUS."""
    path = Path(tempfile.mkdtemp(dir="/dev/shm"))
    yield path
    shutil.rmtree(path)


def test_a_restart_allocates_no_page_past_the_data(tmpfs_path):
    # Two batches, each reserved exactly, end the data at a page boundary where the file's
    # first hole starts: recovery must find the clean end there without reading the hole.
    config = dataclasses.replace(SMALL, segment_bytes_max=4 * 4096, reserve_ahead_bytes=0)
    segment = LogSegment.create(tmpfs_path, 0, config)
    for i in range(2):
        append(segment, sized_batch((4096 - DATA_START) // 2, i))
    segment.close()
    path = log_path(tmpfs_path, 0)
    with open(path, "rb") as f:
        assert os.lseek(f.fileno(), 0, os.SEEK_HOLE) == 4096 < os.path.getsize(path)
    blocks = os.stat(path).st_blocks
    reopened = LogSegment.open(tmpfs_path, 0, config)
    assert (reopened.next_offset, reopened.end_position) == (2, 4096)
    assert os.stat(path).st_blocks == blocks, "the page after the data was allocated"
    reopened.close()


def test_locate_never_finds_a_batch_still_being_filled(tmp_path):
    segment = LogSegment.create(tmp_path, 0, SMALL)
    region = segment.reserve(100)
    region[:] = sized_batch(100, 0)  # a producer's batch, base offset 0, not committed
    del region
    assert segment.locate(0) is None
    segment.discard()
    segment.close()


def test_read_slice_takes_the_batches_that_end_exactly_at_max_bytes(segment):
    for i in range(5):
        append(segment, sized_batch(100, i))
    # From the first batch: no index entry lies at the bound, so the walk decides.
    piece, next_offset = segment.read_slice(1000, 200, 10**9, at_least_one=False)
    assert (piece.position, piece.nbytes, next_offset) == (DATA_START, 200, 1002)


def test_read_slice_never_returns_the_batch_holding_upto_offset(segment):
    append(segment, batch(b"a", b"b", b"c"))
    assert segment.read_slice(1000, 10**6, 1001, at_least_one=True) is None


def test_truncate_to_the_end_reactivates_a_sealed_segment_whole(segment):
    for i in range(3):
        append(segment, sized_batch(100, i))
    segment.seal()
    segment.truncate_to(DATA_START + 300, 1003)
    assert segment.active and (segment.next_offset, segment.end_position) == (1003,
                                                                               DATA_START + 300)
    assert [o for o, _ in records(read_all(segment))] == [1000, 1001, 1002]


def test_a_segment_whose_time_index_is_gone_is_deleted_whole(tmp_path):
    # A restart on a full disk can leave a segment without its time index file.
    segment = LogSegment.create(tmp_path, 0, SMALL)
    append(segment, sized_batch(100, 0))
    time_index_path(tmp_path, 0).unlink()
    segment.delete()
    assert list(tmp_path.iterdir()) == []


def _segment_with_a_flat_timestamp_tail(tmp_path):
    """20 batches stamped 1000, 2000, ... up to 8000, then 8000 on: the time index stops
    growing while the offset index goes on."""
    segment = LogSegment.create(tmp_path, 0, SMALL)
    for i in range(20):
        append(segment, sized_batch(100, i, timestamp_ms=1_000 * (min(i, 7) + 1)))
    segment.close()


def test_a_clean_reopen_keeps_the_stored_time_index(tmp_path):
    _segment_with_a_flat_timestamp_tail(tmp_path)
    stored = TimeIndex.read_entries(time_index_path(tmp_path, 0))
    assert len(stored) >= 3 and stored[-1][0] == 8_000, "a time index that stopped growing"
    LogSegment.open(tmp_path, 0, SMALL).close()
    assert TimeIndex.read_entries(time_index_path(tmp_path, 0)) == stored


def test_a_reopened_segment_starts_timestamp_searches_at_its_time_index_entries(tmp_path):
    _segment_with_a_flat_timestamp_tail(tmp_path)
    segment = LogSegment.open(tmp_path, 0, SMALL)
    assert segment.timestamp_search_start(9_000) == 7  # the first batch stamped 8000
    segment.close()


def test_a_file_system_without_hole_support_recovers_the_whole_file(tmp_path, monkeypatch):
    _filled_segment(tmp_path, count=10)
    real_lseek = os.lseek

    def no_seek_hole(fd: int, position: int, whence: int) -> int:
        if whence == os.SEEK_HOLE:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_lseek(fd, position, whence)

    monkeypatch.setattr(os, "lseek", no_seek_hole)
    segment = LogSegment.open(tmp_path, 0, SMALL)
    assert (segment.next_offset, segment.end_position) == (10, DATA_START + 1000)
    segment.close()


def test_an_index_entry_inside_a_batch_is_reported_at_its_byte(tmp_path, caplog):
    _filled_segment(tmp_path, count=20)
    index_path(tmp_path, 0).write_bytes(
        bytes.fromhex("00000003 0000013c 00000013 000007ae".replace(" ", "")))
    with caplog.at_level(logging.WARNING):
        LogSegment.open(tmp_path, 0, SMALL).close()
    assert "index entry at byte 1966 names no batch" in caplog.text


def test_headers_racing_a_truncation_that_ends_the_file_stop_at_the_cut(segment):
    # The cut (and a roll: the file ends at it) lands after the walk took its snapshot of
    # the committed end, when it asks the index where to start: a short read is the end.
    for i in range(3):
        append(segment, sized_batch(100, i))
    cuts: list[int] = []
    real_lookup = segment._index.lookup

    def cut_then_look_up(offset: int) -> tuple[int, int] | None:
        if not cuts:
            segment.truncate_to(DATA_START + 100, 1001)
            segment.seal()
            cuts.append(offset)
        return real_lookup(offset)

    segment._index.lookup = cut_then_look_up
    walked = [(header.base_offset, position) for header, position in segment.headers_from(1000)]
    assert cuts == [1000], "the cut came between the walk's snapshot and its first read"
    assert walked == [(1000, DATA_START)]
