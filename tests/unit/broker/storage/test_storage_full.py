"""A full disk is an error, not a crash: appends, rolls and topic creation refused with
StorageFullError (KAFKA_STORAGE_ERROR, retriable) leave nothing visible and nothing behind,
reads go on, and the next attempt succeeds once there is room again."""

import dataclasses
import logging

import pytest

from common.kaska.errors import KaskaStorageError, error_for_code
from services.broker.storage import index_file
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.errors import StorageFullError
from services.broker.storage.log import Log
from services.broker.storage.offset_index import OffsetIndex, index_path
from services.broker.storage.partition import PartitionLog
from services.broker.storage.producer_state import ProducerSnapshots

from .batches import SMALL, batch, new_producer_id, records, sized_batch
from .full_disk import refuse_calls, refuse_reservations, refuse_writes

# Reserve exactly each batch, so that every append asks the file system for blocks.
EXACT = dataclasses.replace(SMALL, reserve_ahead_bytes=0)


def values(part: PartitionLog) -> list[bytes]:
    return [value for _, value in records(part.read_bytes(part.log_start_offset, 10**7))]


def test_storage_error_is_kafkas_retriable_code_56():
    assert (KaskaStorageError.code, KaskaStorageError.retriable) == (56, True)
    assert error_for_code(56) is KaskaStorageError
    assert issubclass(StorageFullError, KaskaStorageError)


def test_refused_append_leaves_nothing_visible_then_succeeds_once_freed(tmp_path, monkeypatch):
    part = PartitionLog(tmp_path / "p", EXACT)
    pid = new_producer_id()
    part.append(batch(b"before", producer_id=pid, sequence=0))
    disk = refuse_reservations(monkeypatch)
    filled = []
    with pytest.raises(StorageFullError) as caught:
        part.append_from(len(batch(b"x")), filled.append)
    assert not filled, "no byte may be received into an unreserved page (SIGBUS)"
    assert caught.value.code == 56 and caught.value.retriable
    assert part.log_end_offset == 1 and values(part) == [b"before"]  # reads still served
    assert part.last_sequence(pid) == 0
    disk.free()
    assert part.append(batch(b"after", producer_id=pid, sequence=1)).base_offset == 1
    part.close()
    reopened = PartitionLog(tmp_path / "p", EXACT)
    assert values(reopened) == [b"before", b"after"]
    reopened.close()


def test_reservation_ahead_falls_back_to_what_the_batch_needs(tmp_path, monkeypatch):
    space = DiskSpace(tmp_path)
    asked = []

    def fallocate(fd, offset, nbytes):
        asked.append(nbytes)
        if nbytes > 100:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("services.broker.storage.disk_space.fallocate", fallocate)
    assert space.reserve(0, 0, 100, tmp_path / "f", ahead_bytes=900) == 100
    assert asked == [1000, 100]
    assert space.refusals == 0 and not space.full  # the batch fitted: nothing refused


@pytest.mark.parametrize("owner, name", [(ProducerSnapshots, "write"),
                                         (OffsetIndex, "rewrite")],
                         ids=["snapshot", "segment"])
def test_refused_roll_keeps_the_active_segment(tmp_path, monkeypatch, owner, name):
    part = PartitionLog(tmp_path / "p", SMALL)
    pid = new_producer_id()
    for sequence in range(3):
        part.append(sized_batch(1200, sequence, producer_id=pid, sequence=sequence))
    assert part.segment_count == 1
    disk = refuse_calls(monkeypatch, owner, name)
    with pytest.raises(StorageFullError):
        part.append(sized_batch(1200, 3, producer_id=pid, sequence=3))  # needs a roll
    assert disk.refused == 1
    assert (part.segment_count, part.log_end_offset, len(values(part))) == (1, 3, 3)
    names = sorted(path.name for path in (tmp_path / "p").iterdir())
    assert [n for n in names if n.endswith((".tmp", ".index"))] == [f"{0:020d}.index"]
    disk.free()
    assert part.append(sized_batch(1200, 3, producer_id=pid, sequence=3)).base_offset == 3
    assert part.segment_count == 2
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert reopened.log_end_offset == 4 and reopened.last_sequence(pid) == 3
    reopened.close()


def test_index_entry_without_room_is_skipped_not_a_failed_append(tmp_path, monkeypatch):
    part = PartitionLog(tmp_path / "p", dataclasses.replace(SMALL, index_interval_bytes=1))
    part.append(batch(b"a"))
    disk = refuse_writes(monkeypatch, index_file)  # the index files' writes
    part.append(batch(b"b"))  # stamped and visible; its index entries had no room
    part.append(batch(b"c"))
    # b's and c's offset index entry and time index entry (no time entry yet: each tried)
    assert disk.refused == 4 and values(part) == [b"a", b"b", b"c"]
    disk.free()
    part.append(batch(b"d"))
    assert [records(part.read_bytes(offset, 1))[0][0] for offset in range(4)] == [0, 1, 2, 3]
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)  # the sparser index passes recovery
    assert values(reopened) == [b"a", b"b", b"c", b"d"]
    reopened.close()


def test_restart_on_a_full_disk_opens_without_rebuilding_the_index_file(tmp_path, monkeypatch):
    part = PartitionLog(tmp_path / "p", SMALL)
    for i in range(20):
        part.append(batch(b"v%d" % i))
    part.close()
    index_path(tmp_path / "p", 0).unlink()
    disk = refuse_calls(monkeypatch, OffsetIndex, "rewrite")
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert disk.refused == 1
    assert records(reopened.read_bytes(17, 1))[0] == (17, b"v17")
    disk.free()
    reopened.append(batch(b"v20"))
    assert values(reopened)[-1] == b"v20"
    reopened.close()


def test_topic_not_created_without_room_and_nothing_left_behind(tmp_path, monkeypatch):
    with Log(tmp_path / "data", SMALL) as log:
        disk = refuse_calls(monkeypatch, OffsetIndex, "rewrite")
        with pytest.raises(StorageFullError):
            log.create_topic("t", 3)
        assert "t" not in log.topics() and not (tmp_path / "data" / "t").exists()
        assert log.space.full and log.space.episodes == 1
        disk.free()
        log.create_topic("t", 3)
        log.partition("t", 2).append(batch(b"x"))
        assert log.topics()["t"] == 3


def test_one_log_line_per_episode_not_per_refusal(tmp_path, caplog):
    space = DiskSpace(tmp_path, free_bytes_resume=0)
    full = StorageFullError(tmp_path / "f", OSError(28, "No space left on device"))
    caplog.set_level(logging.WARNING, logger="services.broker.storage.disk_space")
    for _ in range(5):
        space.refused(full)
    assert (space.refusals, space.episodes, space.full) == (5, 1, True)
    assert space.status() == ""  # free_bytes_resume=0: the probe finds room, episode over
    space.written()
    space.refused(full)
    assert (space.refusals, space.episodes) == (6, 2)
    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "produce refused until space is freed" in line]) == 2
    assert len([line for line in lines if "has room again" in line]) == 1


def test_episode_lasts_while_the_disk_has_less_than_the_resume_margin(tmp_path):
    space = DiskSpace(tmp_path, free_bytes_resume=2**62)
    space.refused(StorageFullError(tmp_path, OSError(28, "No space left on device")))
    space.written()  # a partition with reserved room still appends: the episode goes on
    assert space.full and space.status() == f"storage full on {tmp_path}"


def test_a_refused_reservation_is_counted_in_the_logs_full_disk_state(tmp_path, monkeypatch):
    # The broker's heartbeat and metrics read the Log's DiskSpace: a segment must report its
    # block reservations there, not to a DiskSpace of its own that nobody reads.
    with Log(tmp_path / "data", EXACT) as log:
        log.space.free_bytes_resume = 0  # the episode ends on the next write, however full /tmp
        log.create_topic("t", 1)
        part = log.partition("t", 0)
        part.append(batch(b"before"))
        disk = refuse_reservations(monkeypatch)
        with pytest.raises(StorageFullError):
            part.append(batch(b"refused"))
        assert disk.refused == 1, "the append asked the file system for blocks"
        assert (log.space.full, log.space.refusals, log.space.episodes) == (True, 1, 1)
        disk.free()
        part.append(batch(b"after"))  # room again: the write ends the episode
        assert not log.space.full and values(part) == [b"before", b"after"]
