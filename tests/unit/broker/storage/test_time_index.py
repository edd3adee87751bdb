"""The time index (Kafka's .timeindex): the file, the segment keeping it (appends, truncation,
recovery's rebuild, a full disk), and the partition's lookup of an offset by timestamp."""

import pytest

from common.kaska.kafka_record import ATTR_KAFKA_RECORDS
from common.kaska.record_batch import parse_header
from services.broker.kafka.records import kafka_to_kaska
from services.broker.storage import index_file
from services.broker.storage.errors import CorruptIndexError
from services.broker.storage.partition import PartitionLog
from services.broker.storage.time_index import TimeIndex, time_index_path
from tests.unit.broker.kafka.kafka_batches import BASE_TIMESTAMP_MS, kafka_batch

from .batches import SMALL, sized_batch
from .full_disk import refuse_calls, refuse_writes

# -- the file -------------------------------------------------------------------------------


@pytest.fixture
def index(tmp_path):
    index = TimeIndex(time_index_path(tmp_path, 100), 100)
    for timestamp_ms, offset in ((1_000, 100), (1_500, 104), (3_000, 110)):
        assert index.append(timestamp_ms, offset)
    return index


def test_entries_persist_as_12_byte_pairs(index, tmp_path):
    path = tmp_path / "00000000000000000100.timeindex"
    assert path.stat().st_size == 3 * 12
    assert TimeIndex.read_entries(path) == [(1_000, 0), (1_500, 4), (3_000, 10)]


@pytest.mark.parametrize(
    ("timestamp_ms", "offset"),
    [(999, None), (1_000, None), (1_001, 100), (1_500, 100), (2_999, 104), (9_999, 110)],
)
def test_offset_below_is_the_last_entry_older_than_the_target(index, timestamp_ms, offset):
    assert index.offset_below(timestamp_ms) == offset


def test_truncate_to_offset_drops_entries_at_and_after(index, tmp_path):
    index.truncate_to_offset(104)
    assert index.entries() == [(1_000, 0)]
    assert TimeIndex.read_entries(index.path) == [(1_000, 0)]


def test_torn_and_unordered_files_are_corrupt(tmp_path):
    path = time_index_path(tmp_path, 0)
    path.write_bytes(bytes(13))
    with pytest.raises(CorruptIndexError):
        TimeIndex.read_entries(path)
    TimeIndex.rewrite(path, 0, [(5, 1), (4, 2)])
    with pytest.raises(CorruptIndexError):
        TimeIndex.read_entries(path)


def test_an_entry_without_room_is_skipped(index, monkeypatch):
    disk = refuse_writes(monkeypatch, index_file)  # the index files' writes
    index.close()  # the next write reopens the file through the full disk
    assert not index.append(4_000, 111)
    assert disk.refused == 1 and len(index) == 3
    disk.free()
    assert index.append(4_000, 111)
    assert TimeIndex.read_entries(index.path)[-1] == (4_000, 11)


# -- in the log ------------------------------------------------------------------------------

SEGMENT_BATCHES = 8  # 500-byte batches per 4 KiB segment; an index entry every 256 bytes


def timed_log(path, stamps: list[int]) -> PartitionLog:
    """One 500-byte Kaska batch (one record) per timestamp."""
    part = PartitionLog(path, SMALL)
    for i, stamp in enumerate(stamps):
        part.append(sized_batch(500, i, timestamp_ms=stamp))
    return part


STAMPS = [1_000 + 10 * i for i in range(20)]  # 3 segments: bases 0, 8, 16


def time_entries(directory, base_offset: int) -> list[tuple[int, int]]:
    return TimeIndex.read_entries(time_index_path(directory, base_offset))


def test_segments_index_their_growing_timestamps(tmp_path):
    part = timed_log(tmp_path / "p", STAMPS)
    assert part.segment_base_offsets() == (0, 8, 16)
    # An entry wherever the offset index gets one (from the second batch on, 500 > 256 bytes).
    assert time_entries(tmp_path / "p", 8) == [(1_000 + 10 * o, o - 8) for o in range(9, 16)]
    part.close()


def test_an_older_timestamp_adds_no_entry(tmp_path):
    part = timed_log(tmp_path / "p", [5_000, 6_000, 4_000, 7_000])
    assert time_entries(tmp_path / "p", 0) == [(6_000, 1), (7_000, 3)]
    part.close()


@pytest.mark.parametrize("damage", ["missing", "torn", "sparser"])
def test_recovery_rebuilds_the_time_index(tmp_path, damage):
    timed_log(tmp_path / "p", STAMPS).close()
    path = time_index_path(tmp_path / "p", 8)
    whole = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "torn":
        path.write_bytes(whole[:-5])
    else:
        path.write_bytes(whole[:12])  # what a full disk leaves
    part = PartitionLog(tmp_path / "p", SMALL)
    assert path.read_bytes() == whole
    assert part.offset_for_timestamp(1_125) == (1_130, 13)
    part.close()


def test_truncation_cuts_the_time_index(tmp_path):
    part = timed_log(tmp_path / "p", STAMPS)
    part.truncate_to(12)
    assert time_entries(tmp_path / "p", 8) == [(1_090, 1), (1_100, 2), (1_110, 3)]
    assert part.offset_for_timestamp(1_115) is None
    part.append(sized_batch(500, 99, timestamp_ms=1_500))
    assert part.offset_for_timestamp(1_115) == (1_500, 12)
    part.close()


@pytest.mark.parametrize(
    ("target", "answer"),
    [
        (0, (1_000, 0)),  # before everything: the first record
        (1_000, (1_000, 0)),
        (1_001, (1_010, 1)),  # the earliest record at or after the target
        (1_075, (1_080, 8)),  # the first batch of a segment
        (1_070, (1_070, 7)),  # the last batch of one
        (1_190, (1_190, 19)),
        (1_191, None),  # after everything
    ],
)
def test_offset_for_timestamp_across_segments(tmp_path, target, answer):
    part = timed_log(tmp_path / "p", STAMPS)
    assert part.offset_for_timestamp(target) == answer
    part.close()


def test_offset_for_timestamp_stays_within_the_start_and_the_bound(tmp_path):
    part = timed_log(tmp_path / "p", STAMPS)
    part.delete_records(10)
    assert part.offset_for_timestamp(0) == (1_100, 10)
    assert part.offset_for_timestamp(1_150, upto_offset=15) is None
    assert part.offset_for_timestamp(1_140, upto_offset=15) == (1_140, 14)
    part.close()


def test_unordered_timestamps_answer_the_first_batch_reaching_the_target(tmp_path):
    part = timed_log(tmp_path / "p", [1_000, 3_000, 2_000, 4_000])
    assert part.offset_for_timestamp(2_500) == (3_000, 1)
    assert part.offset_for_timestamp(3_500) == (4_000, 3)
    part.close()


def stored_kafka_batch(count: int) -> bytes:
    """A Kafka batch of `count` records stamped BASE + 10 * i, as the listener stores it."""
    return kafka_to_kaska(kafka_batch([(None, b"v%d" % i, []) for i in range(count)]))


def test_kafka_batches_answer_the_record_reaching_the_target(tmp_path):
    part = PartitionLog(tmp_path / "p", SMALL)
    part.append(stored_kafka_batch(5))  # offsets 0-4, BASE + 0..40
    part.append(sized_batch(200, 5, timestamp_ms=BASE_TIMESTAMP_MS + 100))  # offset 5
    assert parse_header(stored_kafka_batch(1)).attributes & ATTR_KAFKA_RECORDS
    # Inside the Kafka batch, whose first timestamp is below the target.
    assert part.offset_for_timestamp(BASE_TIMESTAMP_MS + 25) == (BASE_TIMESTAMP_MS + 30, 3)
    assert part.offset_for_timestamp(BASE_TIMESTAMP_MS) == (BASE_TIMESTAMP_MS, 0)
    assert part.offset_for_timestamp(BASE_TIMESTAMP_MS + 40) == (BASE_TIMESTAMP_MS + 40, 4)
    assert part.offset_for_timestamp(BASE_TIMESTAMP_MS + 41) == (BASE_TIMESTAMP_MS + 100, 5)
    assert part.offset_for_timestamp(BASE_TIMESTAMP_MS + 101) is None
    part.close()


def test_an_older_kafka_batch_running_past_a_newer_one_is_passed_over(tmp_path):
    """The stated limit (timestamps.py): batches are indexed by their first timestamp, so only
    the batch just before the first one stamped at or after the target is looked into."""
    part = PartitionLog(tmp_path / "p", SMALL)
    part.append(stored_kafka_batch(5))  # offsets 0-4, BASE + 0..40
    part.append(stored_kafka_batch(5))  # offsets 5-9, BASE + 0..40 again
    # Kafka, indexing each batch's largest timestamp, answers offset 3.
    assert part.offset_for_timestamp(BASE_TIMESTAMP_MS + 25) == (BASE_TIMESTAMP_MS + 30, 8)
    part.close()


def test_restart_on_a_full_disk_starts_the_time_index_empty(tmp_path, monkeypatch):
    timed_log(tmp_path / "p", STAMPS).close()
    path = time_index_path(tmp_path / "p", 8)
    path.unlink()
    disk = refuse_calls(monkeypatch, TimeIndex, "rewrite")
    part = PartitionLog(tmp_path / "p", SMALL)  # opens all the same
    assert disk.refused == 1 and not path.exists()
    assert part.offset_for_timestamp(1_125) == (1_130, 13)  # a longer walk, the same answer
    part.close()
    disk.free()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert time_entries(tmp_path / "p", 8) == [(1_000 + 10 * o, o - 8) for o in range(9, 16)]
    reopened.close()
