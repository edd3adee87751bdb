"""DeleteRecords in storage: `PartitionLog.delete_records` moves a logical log start (inside a
segment too), persists it, deletes whole segments below it, and keeps producer dedup."""

import errno

import pytest

from common.kaska.errors import OffsetOutOfRangeError
from services.broker.storage import log_start
from services.broker.storage.errors import StorageFullError
from services.broker.storage.log_start import (
    LOG_START_FILE,
    decode_log_start,
    encode_log_start,
    read_log_start,
)
from services.broker.storage.partition import PartitionLog
from services.broker.storage.segment import LogSegment

from .batches import SMALL, new_producer_id, records, sized_batch
from .full_disk import refuse_writes


def fill(part: PartitionLog, count: int, pid: bytes | None = None) -> None:
    """`count` 500-byte single-record batches (8 per 4 KiB segment)."""
    for i in range(count):
        if pid is None:
            part.append(sized_batch(500, i))
        else:
            part.append(sized_batch(500, i, producer_id=pid, sequence=i))


def segment_files(directory) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def test_log_start_inside_a_segment_hides_records_and_keeps_the_segment(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 20)
    assert part.segment_count == 3
    moved = part.delete_records(3)
    assert (moved.previous, moved.start, moved.segments_deleted) == (0, 3, 0)
    assert moved.records_deleted == 3
    assert part.log_start_offset == 3 and part.held_start_offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        part.read(2, 10_000)
    assert records(part.read_bytes(3, 600))[0][0] == 3
    # Replication still copies the whole batches it holds.
    assert records(part.read_bytes(0, 600, below_start=True))[0][0] == 0
    assert segment_files(tmp_path)[0] == 0


def test_whole_segments_below_the_start_are_deleted(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 20)
    bases = part.segment_base_offsets()
    moved = part.delete_records(bases[2] + 1)
    assert moved.segments_deleted == 2
    assert segment_files(tmp_path) == [bases[2]]
    assert part.log_start_offset == bases[2] + 1


def test_start_at_the_log_end_rolls_and_frees_everything(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 5)
    assert part.segment_count == 1
    moved = part.delete_records(5)
    assert moved.segments_deleted == 1
    assert segment_files(tmp_path) == [5]
    assert part.log_start_offset == part.log_end_offset == 5
    part.append(sized_batch(500, 99))
    assert records(part.read_bytes(5, 600))[0][0] == 5


def test_below_current_start_changes_nothing_and_above_end_is_refused(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 10)
    part.delete_records(4)
    moved = part.delete_records(2)
    assert (moved.previous, moved.start, moved.records_deleted) == (4, 4, 0)
    with pytest.raises(OffsetOutOfRangeError):
        part.delete_records(11)
    assert part.log_start_offset == 4


def test_the_start_survives_a_restart(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 20)
    part.delete_records(11)
    part.close()
    again = PartitionLog(tmp_path, SMALL)
    assert again.log_start_offset == 11
    assert read_log_start(tmp_path) == 11
    with pytest.raises(OffsetOutOfRangeError):
        again.read(10, 600)


def test_a_crash_before_the_segments_went_deletes_them_on_open(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 20)
    bases = part.segment_base_offsets()
    part.close()
    # The start was persisted, then the process died before deleting anything.
    (tmp_path / LOG_START_FILE).write_bytes(encode_log_start(bases[2]))
    again = PartitionLog(tmp_path, SMALL)
    assert segment_files(tmp_path) == list(bases[2:])
    assert again.log_start_offset == bases[2]


def test_an_unreadable_start_file_falls_back_to_the_first_segment(tmp_path, caplog):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 4)
    part.close()
    (tmp_path / LOG_START_FILE).write_bytes(b"KLSO\x00\x01garbage")
    again = PartitionLog(tmp_path, SMALL)
    assert again.log_start_offset == 0
    assert "unreadable log start" in caplog.text


def test_start_file_codec_round_trip_and_rejects_corruption():
    data = encode_log_start(123_456_789)
    assert decode_log_start(data) == 123_456_789
    assert decode_log_start(data[:-1]) is None
    assert decode_log_start(data[:-1] + bytes([data[-1] ^ 1])) is None


def test_truncation_below_the_start_brings_the_start_down_to_the_end(tmp_path):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 10)
    part.delete_records(8)
    part.truncate_to(6)
    assert part.log_end_offset == 6 and part.log_start_offset == 6
    part.append(sized_batch(500, 7))
    assert records(part.read_bytes(6, 600))[0][0] == 6
    part.close()
    assert PartitionLog(tmp_path, SMALL).log_start_offset == 6


def test_a_retry_below_the_start_is_a_duplicate_after_a_restart(tmp_path):
    pid = new_producer_id()
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 20, pid)
    part.delete_records(part.segment_base_offsets()[2] + 2)
    part.close()
    again = PartitionLog(tmp_path, SMALL)
    end = again.log_end_offset
    # The last batch (sequence 19) is re-sent: recognised, nothing stored twice.
    result = again.append(sized_batch(500, 19, producer_id=pid, sequence=19))
    assert result.duplicate and result.base_offset == 19
    assert again.log_end_offset == end
    # The next one goes on.
    assert not again.append(sized_batch(500, 20, producer_id=pid, sequence=20)).duplicate


def test_a_producer_whose_batches_are_all_below_the_start_is_remembered(tmp_path):
    old, new = new_producer_id(), new_producer_id()
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 3, old)
    fill(part, 17, new)
    part.delete_records(part.log_end_offset - 1)
    assert part.segment_count == 1
    part.close()
    again = PartitionLog(tmp_path, SMALL)
    assert again.last_sequence(old) == 2
    result = again.append(sized_batch(500, 2, producer_id=old, sequence=2))
    assert result.duplicate and result.base_offset == 2


def test_a_full_disk_refusing_the_start_file_moves_nothing(tmp_path, monkeypatch):
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 20)
    disk = refuse_writes(monkeypatch, log_start)
    with pytest.raises(StorageFullError):
        part.delete_records(10)
    assert disk.refused and part.log_start_offset == 0 and part.segment_count == 3
    assert not list(tmp_path.glob("log-start*")), "no file, no leftover"
    disk.free()
    assert part.delete_records(10).start == 10


def test_a_full_disk_refusing_the_roll_still_moves_the_start(tmp_path, monkeypatch):
    """At the log end the active segment is rolled to go too; without room for the new
    segment the start still moves (the records are hidden), the active segment stays."""
    part = PartitionLog(tmp_path, SMALL)
    fill(part, 10)
    refused = []

    def no_room(directory, base_offset, *args, **kwargs):
        refused.append(base_offset)
        raise StorageFullError(directory, OSError(errno.ENOSPC, "no space"))

    monkeypatch.setattr(LogSegment, "create", no_room)
    moved = part.delete_records(10)
    assert refused == [10] and moved.start == 10 and part.log_start_offset == 10
    assert segment_files(tmp_path) == [8]
    with pytest.raises(OffsetOutOfRangeError):
        part.read(9, 600)
