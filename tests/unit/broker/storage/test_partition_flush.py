"""flush() syncs only partitions written since their last flush (regression: a broker holding
thousands of idle partitions, as the frame fuzzer leaves behind, took ~9 s to stop)."""

from services.broker.storage import partition as partition_module
from services.broker.storage.partition import PartitionLog
from services.broker.storage.segment import LogSegment

from .batches import SMALL, batch


def _count_syncs(monkeypatch) -> list[str]:
    synced: list[str] = []
    monkeypatch.setattr(LogSegment, "flush", lambda self: synced.append("segment"))
    monkeypatch.setattr(partition_module, "fsync_directory",
                        lambda directory: synced.append("directory"))
    return synced


def test_flush_of_an_untouched_partition_syncs_nothing(tmp_path, monkeypatch):
    synced = _count_syncs(monkeypatch)
    part = PartitionLog(tmp_path / "p", SMALL)
    part.append(batch(b"a"))
    part.close()
    synced.clear()
    reopened = PartitionLog(tmp_path / "p", SMALL)  # recovered, nothing new written
    reopened.flush()
    reopened.close()
    assert synced == []


def test_flush_syncs_once_after_writes_and_not_again(tmp_path, monkeypatch):
    synced = _count_syncs(monkeypatch)
    part = PartitionLog(tmp_path / "p", SMALL)
    part.flush()
    assert synced == []
    part.append(batch(b"a"))
    part.append(batch(b"b"))
    part.flush()
    assert synced == ["segment", "directory"]
    part.flush()
    assert synced == ["segment", "directory"]
    part.close()


def test_truncation_makes_the_partition_need_a_flush(tmp_path, monkeypatch):
    synced = _count_syncs(monkeypatch)
    part = PartitionLog(tmp_path / "p", SMALL)
    part.append(batch(b"a"))
    part.append(batch(b"b"))
    part.flush()
    synced.clear()
    part.truncate_to(1)
    part.flush()
    assert synced == ["segment", "directory"]
    part.close()
