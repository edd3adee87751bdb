"""PartitionLog.sync(), replication's fsync (policy `entry`): every segment appended to since
the last sync is fsynced -- whatever the flush schedule, across rolls, and everything found on
open -- and nothing when nothing was appended."""

import os

from services.broker.storage import partition as partition_module
from services.broker.storage.partition import PartitionLog

from .batches import SMALL, sized_batch


def _record_syncs(monkeypatch) -> list[str]:
    """What sync() fsyncs: segment files by name, the directory as "directory"."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(partition_module, "fsync_directory",
                        lambda directory: synced.append("directory"))
    return synced


def test_sync_covers_new_appends_only_and_every_segment_of_a_roll(tmp_path, monkeypatch):
    part = PartitionLog(tmp_path / "p", SMALL)  # flush_interval_ms None: no flush schedule
    synced = _record_syncs(monkeypatch)
    assert part.sync() == 2 and synced == [f"{0:020d}.log", "directory"]  # all found on open
    synced.clear()
    assert part.sync() == 0 and synced == []
    part.append(sized_batch(500, 1))
    assert part.sync() == 1 and synced == [f"{0:020d}.log"]
    synced.clear()
    while part.segment_count < 3:  # two rolls between syncs
        part.append(sized_batch(1500, part.log_end_offset))
    bases = part.segment_base_offsets()
    part.sync()
    assert synced == [f"{base:020d}.log" for base in bases] + ["directory"]
    part.close()


def test_sync_on_open_covers_what_recovery_found(tmp_path, monkeypatch):
    part = PartitionLog(tmp_path / "p", SMALL)
    while part.segment_count < 2:
        part.append(sized_batch(1500, part.log_end_offset))
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    synced = _record_syncs(monkeypatch)
    reopened.sync()
    assert synced == [f"{base:020d}.log" for base in reopened.segment_base_offsets()] + [
        "directory"]
    reopened.close()
