import dataclasses
import os
import socket
import threading

import pytest

from common.kaska.errors import (
    CorruptBatchError,
    DuplicateSequenceError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
)
from common.kaska.record_batch import iter_batches
from services.broker.storage.errors import PartitionClosedError
from services.broker.storage.partition import PartitionLog
from services.broker.storage.segment import DATA_START, LogSegment

from .batches import SMALL, batch, new_producer_id, records, sized_batch


@pytest.fixture
def part(tmp_path):
    log = PartitionLog(tmp_path / "p", SMALL)
    yield log
    log.close()


def _config(**overrides):
    return dataclasses.replace(SMALL, **overrides)


def offsets(data: bytes) -> list[int]:
    return [offset for offset, _ in records(data)]


def test_offsets_are_dense_and_reads_return_what_was_appended(part):
    results = [part.append(batch(b"a", b"b")), part.append(batch(b"c")),
               part.append(batch(b"d", b"e", b"f"))]
    assert [(r.base_offset, r.record_count, r.duplicate) for r in results] == [
        (0, 2, False), (2, 1, False), (3, 3, False)]
    assert (part.log_start_offset, part.log_end_offset) == (0, 6)
    assert records(part.read_bytes(0, 10**6)) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"),
                                                  (4, b"e"), (5, b"f")]


def test_read_starts_with_the_batch_holding_the_offset(part):
    part.append(batch(b"a", b"b", b"c"))
    part.append(batch(b"d"))
    assert offsets(part.read_bytes(1, 10**6)) == [0, 1, 2, 3]
    assert offsets(part.read_bytes(3, 10**6)) == [3]


def test_read_at_end_is_empty_and_beyond_is_out_of_range(part):
    part.append(batch(b"a"))
    assert part.read(1, 10**6) == []
    with pytest.raises(OffsetOutOfRangeError):
        part.read(2, 10**6)
    with pytest.raises(OffsetOutOfRangeError):
        part.read(-1, 10**6)


def test_max_bytes_gives_whole_batches_but_at_least_one(part):
    for i in range(5):
        part.append(sized_batch(200, i))
    assert offsets(part.read_bytes(0, 450)) == [0, 1]
    assert offsets(part.read_bytes(0, 10)) == [0]
    assert offsets(part.read_bytes(0, 0)) == [0]


def test_upto_offset_bounds_the_answer(part):
    part.append(batch(b"a", b"b"))
    part.append(batch(b"c", b"d"))
    part.append(batch(b"e"))
    assert offsets(part.read_bytes(0, 10**6, upto_offset=4)) == [0, 1, 2, 3]
    assert offsets(part.read_bytes(0, 10**6, upto_offset=3)) == [0, 1]  # 3 is mid-batch
    assert part.read(2, 10**6, upto_offset=2) == []


def test_segments_roll_at_size_and_reads_span_them(part, tmp_path):
    for i in range(40):
        part.append(sized_batch(500, i))
    bases = part.segment_base_offsets()
    assert bases == (0, 8, 16, 24, 32)  # 8 batches of 500 bytes fit in 4096
    files = sorted((tmp_path / "p").glob("*.log"))
    assert [int(f.stem) for f in files] == list(bases)
    for f in files[:-1]:  # sealed: trimmed to 16 + 8 * 500 bytes
        assert os.path.getsize(f) == DATA_START + 8 * 500
    assert os.path.getsize(files[-1]) == SMALL.segment_bytes_max
    slices = part.read(5, 10**6)
    assert len(slices) == 5
    assert offsets(part.read_bytes(5, 10**6)) == list(range(5, 40))


def test_slices_go_out_through_sendfile(part):
    for i in range(12):
        part.append(sized_batch(400, i))
    slices = part.read(0, 10**6)
    left, right = socket.socketpair()
    with left, right:
        for piece in slices:
            sent = 0
            while sent < piece.nbytes:
                sent += os.sendfile(left.fileno(), piece.fd, piece.position + sent,
                                    piece.nbytes - sent)
        left.shutdown(socket.SHUT_WR)
        received = b"".join(iter(lambda: right.recv(65536), b""))
    assert offsets(received) == list(range(12))


def test_fill_that_raises_leaves_nothing_visible(part, tmp_path):
    part.append(batch(b"before"))
    data = batch(b"lost")

    def broken_socket(region):
        region[:20] = data[:20]
        raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        part.append_from(len(data), broken_socket)
    assert part.log_end_offset == 1
    assert part.append(batch(b"after")).base_offset == 1
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert records(reopened.read_bytes(0, 10**6)) == [(0, b"before"), (1, b"after")]
    reopened.close()


def test_corrupt_batch_is_refused_and_nothing_visible(part):
    bad = bytearray(batch(b"x" * 50))
    bad[70] ^= 0x40
    with pytest.raises(CorruptBatchError):
        part.append(bytes(bad))
    assert part.log_end_offset == 0 and part.read(0, 10**6) == []


def test_size_bounds_are_checked_before_fill(part):
    def never(region):
        raise AssertionError("fill must not run")

    with pytest.raises(MessageTooLargeError):
        part.append_from(SMALL.batch_bytes_max + 1, never)
    with pytest.raises(CorruptBatchError):
        part.append_from(59, never)


def test_same_batch_twice_is_stored_once(part, tmp_path):
    pid = new_producer_id()
    first = batch(b"a", b"b", producer_id=pid, sequence=0)
    assert part.append(first).base_offset == 0
    part.append(batch(b"c", producer_id=pid, sequence=1))
    again = part.append(first)
    assert (again.base_offset, again.record_count, again.duplicate) == (0, 2, True)
    assert part.log_end_offset == 3
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    again = reopened.append(first)
    assert again.duplicate and again.base_offset == 0
    assert reopened.append(batch(b"d", producer_id=pid, sequence=2)).base_offset == 3
    assert offsets(reopened.read_bytes(0, 10**6)) == [0, 1, 2, 3]
    reopened.close()


def test_sequence_gap_and_forgotten_duplicate_are_errors(part):
    pid = new_producer_id()
    for seq in range(7):
        part.append(batch(b"v", producer_id=pid, sequence=seq))
    with pytest.raises(OutOfOrderSequenceError):
        part.append(batch(b"v", producer_id=pid, sequence=8))
    with pytest.raises(DuplicateSequenceError):
        part.append(batch(b"v", producer_id=pid, sequence=0))
    assert part.log_end_offset == 7


def test_retention_by_bytes_deletes_whole_old_segments(tmp_path):
    part = PartitionLog(tmp_path / "p", _config(retention_bytes=8000))
    for i in range(40):  # 5 segments of 8 batches (4016 bytes each), the last one active
        part.append(sized_batch(500, i))
    assert part.apply_retention(now_ms=0) == 3
    assert part.log_start_offset == 24
    assert part.size_bytes >= 8000
    with pytest.raises(OffsetOutOfRangeError):
        part.read(23, 100)
    assert offsets(part.read_bytes(24, 10**6))[0] == 24
    part.close()


def test_retention_by_age_uses_the_newest_timestamp_and_spares_the_active(tmp_path):
    part = PartitionLog(tmp_path / "p", _config(retention_ms=1000))
    for i in range(24):  # segments of 8 batches with timestamps 0..7000, 8000.., 16000..
        part.append(sized_batch(500, i, timestamp_ms=i * 1000))
    assert part.apply_retention(now_ms=7999) == 0    # newest of segment 0 is 7000
    assert part.apply_retention(now_ms=8001) == 1
    assert part.apply_retention(now_ms=10**9) == 1   # the third is active, never deleted
    assert part.segment_base_offsets() == (16,)
    part.close()


def test_slice_in_flight_survives_retention_deleting_its_segment(tmp_path):
    part = PartitionLog(tmp_path / "p", _config(retention_bytes=0))
    for i in range(20):
        part.append(sized_batch(500, i))
    (piece,) = part.read(0, 500)
    expected = os.pread(piece.fd, piece.nbytes, piece.position)
    assert part.apply_retention(now_ms=0) == 2
    assert not (tmp_path / "p" / "00000000000000000000.log").exists()
    assert os.pread(piece.fd, piece.nbytes, piece.position) == expected
    part.close()


def _open_fds_under(directory) -> int:
    """This process's descriptors on files below `directory` (other tests' threads may open
    and close descriptors of their own meanwhile: only the partition's count)."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # closed since the listing
            continue
        held += target.startswith(f"{directory}/")
    return held


def test_close_releases_every_descriptor(tmp_path):
    part = PartitionLog(tmp_path / "p", SMALL)
    for i in range(30):
        part.append(sized_batch(500, i))
    assert _open_fds_under(tmp_path) > 0
    slices = part.read(0, 10**6)
    part.close()
    assert _open_fds_under(tmp_path) > 0  # the slices still hold their files
    del slices
    assert _open_fds_under(tmp_path) == 0


def test_truncate_to_mid_batch_and_across_segments(part):
    for i in range(20):
        part.append(batch(b"%d" % i, b"x" * 400))  # 2 records per batch
    part.truncate_to(17)  # mid-batch: the batch 16..17 goes whole
    assert part.log_end_offset == 16
    assert part.segment_base_offsets() == (0, 16)
    part.truncate_to(15)
    assert part.log_end_offset == 14 and part.segment_base_offsets() == (0,)
    assert part.append(batch(b"new")).base_offset == 14
    assert offsets(part.read_bytes(0, 10**6)) == list(range(15))


def test_truncate_forgets_truncated_producer_batches(part):
    pid = new_producer_id()
    for seq in range(4):
        part.append(batch(b"v", producer_id=pid, sequence=seq))
    part.truncate_to(2)
    retry = part.append(batch(b"v", producer_id=pid, sequence=2))
    assert (retry.base_offset, retry.duplicate) == (2, False)


def test_truncate_below_start_empties_the_log(tmp_path):
    part = PartitionLog(tmp_path / "p", _config(retention_bytes=0))
    for i in range(20):
        part.append(sized_batch(500, i))
    part.apply_retention(now_ms=0)
    part.truncate_to(3)
    assert (part.log_start_offset, part.log_end_offset) == (3, 3)
    assert part.append(batch(b"x")).base_offset == 3
    part.close()


def test_flush_interval_fsyncs_on_the_append_path(tmp_path, monkeypatch):
    flushed = []
    monkeypatch.setattr(LogSegment, "flush", lambda self: flushed.append(self.base_offset))
    now = [0]
    part = PartitionLog(tmp_path / "p", _config(flush_interval_ms=100), clock_ms=lambda: now[0])
    part.append(batch(b"a"))
    assert flushed == []
    now[0] = 100
    part.append(batch(b"b"))
    assert flushed == [0]
    part.close()


def test_no_fsync_without_a_flush_interval(part, monkeypatch):
    flushed = []
    monkeypatch.setattr(LogSegment, "flush", lambda self: flushed.append(self.base_offset))
    for i in range(20):
        part.append(sized_batch(500, i))
    assert flushed == []
    part.flush()
    assert flushed == [16]


def test_readers_see_only_whole_committed_batches_while_appending(part):
    done = threading.Event()
    seen: list[tuple[int, list[int]]] = []

    def reader():
        while not done.is_set():
            end = part.log_end_offset
            data = part.read_bytes(0, 10**6)
            seen.append((end, [h.base_offset for h, _ in iter_batches(data)]))  # checks CRCs

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(300):
            part.append(sized_batch(300, i))
    finally:
        done.set()
        thread.join()
    assert len(seen) > 1
    for end, got in seen:
        assert got == list(range(len(got))) and len(got) >= end


def test_closed_partition_refuses_everything(part):
    part.append(batch(b"a"))
    part.close()
    with pytest.raises(PartitionClosedError):
        part.append(batch(b"b"))
    with pytest.raises(PartitionClosedError):
        part.read(0, 100)
    part.close()  # idempotent


def test_roll_fsyncs_the_old_segment_when_a_flush_interval_is_set(tmp_path, monkeypatch):
    flushed = []
    monkeypatch.setattr(LogSegment, "flush", lambda self: flushed.append(self.base_offset))
    part = PartitionLog(tmp_path / "p", _config(flush_interval_ms=10**9), clock_ms=lambda: 0)
    for i in range(9):  # the 9th batch rolls
        part.append(sized_batch(500, i))
    assert flushed == [0]
    part.close()


def test_a_fill_that_keeps_a_view_does_not_break_roll_or_close(part):
    kept = []
    data = sized_batch(500)

    def hoarding_fill(region):
        kept.append(region[100:])  # e.g. a view left in a saved traceback
        region[:] = data

    for _ in range(10):  # rolls once with a live view into the old map
        part.append_from(len(data), hoarding_fill)
    part.close()
    assert len(kept) == 10
