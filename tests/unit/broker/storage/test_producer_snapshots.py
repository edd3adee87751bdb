"""Producer-state snapshots (`%020d.snapshot`): format, and how rolls, retention, truncation,
restart and recovery keep the producer table equal to the one the partition had."""

import dataclasses
import logging
import random
import struct

import crc32c
import pytest

from common.kaska.record_batch import parse_header
from services.broker.storage.errors import CorruptSnapshotError
from services.broker.storage.partition import PartitionLog
from services.broker.storage.producer_state import (
    ProducerStateTable,
    snapshot_path,
)
from services.broker.storage.segment import LogSegment, log_path

from .batches import SMALL, batch, new_producer_id, sized_batch

RETAIN_NONE = dataclasses.replace(SMALL, retention_bytes=0)


class SimulatedCrash(Exception):
    """A SIGKILL at a chosen point: the object is abandoned and the directory reopened."""


def table_of(part: PartitionLog) -> bytes:
    """The partition's producer table, in the snapshot encoding (order included)."""
    return part._producers.encode_snapshot(0)


def snapshot_files(directory) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.snapshot"))


def header(pid, sequence, count=1):
    return parse_header(batch(*[b"r"] * count, producer_id=pid, sequence=sequence))


def fill_with_producers(part: PartitionLog, producers: list[bytes], batches: int) -> None:
    """`batches` 500-byte batches, round-robin over `producers` (8 per segment)."""
    for i in range(batches):
        pid = producers[i % len(producers)]
        part.append(sized_batch(500, i, producer_id=pid, sequence=i // len(producers)))


# -- the format -----------------------------------------------------------------------------


def test_snapshot_round_trip_keeps_batches_and_order():
    table = ProducerStateTable(100)
    pids = [new_producer_id() for _ in range(4)]
    for n in range(12):
        table.record(header(pids[n % 3], n // 3, count=1 + n % 2), 10 * n)
    table.record(header(pids[0], 4), 999)  # pids[0] becomes the most recent
    data = table.encode_snapshot(77)
    loaded = ProducerStateTable(100)
    loaded.load_snapshot(data, 77)
    assert loaded.encode_snapshot(77) == data
    assert list(loaded._batches) == [pids[1], pids[2], pids[0]]
    assert loaded.check(header(pids[1], 2)).base_offset == 70
    assert loaded.last_sequence(pids[0]) == 4


def test_an_empty_table_snapshots_to_header_and_crc():
    data = ProducerStateTable(5).encode_snapshot(0)
    assert len(data) == 18 + 4 and data[:4] == b"KPSN"
    table = ProducerStateTable(5)
    table.load_snapshot(data, 0)
    assert len(table) == 0


def test_loading_into_a_smaller_bound_keeps_the_most_recent():
    table = ProducerStateTable(10)
    pids = [new_producer_id() for _ in range(5)]
    for n, pid in enumerate(pids):
        table.record(header(pid, 0), n)
    small = ProducerStateTable(2)
    small.load_snapshot(table.encode_snapshot(5), 5)
    assert [small.last_sequence(pid) for pid in pids] == [None, None, None, 0, 0]


def _snapshot_with(producers: int = 2) -> bytes:
    table = ProducerStateTable(10)
    for n in range(producers):
        table.record(header(new_producer_id(), 3), n)
    return table.encode_snapshot(40)


def _recrc(body: bytes) -> bytes:
    return body + struct.pack(">I", crc32c.crc32c(body))


@pytest.mark.parametrize("cut", range(0, 22 + 2 * (17 + 20), 7))
def test_every_truncated_snapshot_is_refused(cut):
    data = _snapshot_with()
    table = ProducerStateTable(10)
    table.record(header(new_producer_id(), 0), 0)
    with pytest.raises(CorruptSnapshotError):
        table.load_snapshot(data[:cut], 40)
    assert len(table) == 0


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: d[:30] + bytes([d[30] ^ 1]) + d[31:], "CRC32C"),
    (lambda d: _recrc(b"XPSN" + d[4:-4]), "not a version 1"),
    (lambda d: _recrc(d[:4] + b"\0\2" + d[6:-4]), "not a version 1"),
    (lambda d: _recrc(d[:14] + struct.pack(">I", 3) + d[18:-4]), "announces 3"),
    (lambda d: _recrc(d[:14] + struct.pack(">I", 1) + d[18:-4]), "after the last"),
    (lambda d: _recrc(d[:34] + b"\0" + d[35:-4]), "malformed"),      # batch_count 0
    (lambda d: _recrc(d[:34] + b"\6" + d[35:-4]), "malformed"),      # over BATCHES_REMEMBERED
    (lambda d: _recrc(d[:55] + d[18:34] + d[71:-4]), "malformed"),  # the same pid twice
])
def test_damaged_snapshots_are_refused(damage, message):
    with pytest.raises(CorruptSnapshotError, match=message):
        ProducerStateTable(10).load_snapshot(damage(_snapshot_with()), 40)


def test_a_snapshot_named_for_another_offset_is_refused():
    with pytest.raises(CorruptSnapshotError, match="offset 40, expected 41"):
        ProducerStateTable(10).load_snapshot(_snapshot_with(), 41)


# -- rolls and recovery ---------------------------------------------------------------------


def test_each_roll_writes_the_table_at_the_new_segment_base(tmp_path):
    part = PartitionLog(tmp_path / "p", SMALL)
    pid = new_producer_id()
    fill_with_producers(part, [pid], 20)  # segments 0, 8, 16
    assert snapshot_files(tmp_path / "p") == [8, 16]
    at_8 = ProducerStateTable(10)
    at_8.load_snapshot(snapshot_path(tmp_path / "p", 8).read_bytes(), 8)
    assert at_8.last_sequence(pid) == 7 and at_8.check(header(pid, 3)).base_offset == 3
    part.close()


def test_retention_keeps_a_gone_producer_across_a_restart(tmp_path):
    """The point of snapshots: a late retry of a batch whose segment retention deleted is
    still answered as a duplicate after the broker restarts."""
    directory = tmp_path / "p"
    part = PartitionLog(directory, RETAIN_NONE)
    early = new_producer_id()
    part.append(sized_batch(500, 0, producer_id=early, sequence=0))
    part.append(sized_batch(500, 1, producer_id=early, sequence=1))
    fill_with_producers(part, [bytes(16)], 30)  # not idempotent: segments 0, 8, 16, 24
    assert part.apply_retention(now_ms=0) == 3 and part.log_start_offset == 24
    assert snapshot_files(directory) == [24]
    before = table_of(part)
    part.close()
    part = PartitionLog(directory, RETAIN_NONE)
    assert table_of(part) == before
    retry = part.append(sized_batch(500, 1, producer_id=early, sequence=1))
    assert (retry.duplicate, retry.base_offset) == (True, 1)
    assert part.append(sized_batch(500, 2, producer_id=early, sequence=2)).duplicate is False
    part.close()


def test_a_corrupt_snapshot_at_the_log_start_is_ignored_with_a_warning(tmp_path, caplog):
    directory = tmp_path / "p"
    part = PartitionLog(directory, RETAIN_NONE)
    early = new_producer_id()
    part.append(sized_batch(500, 0, producer_id=early, sequence=0))
    fill_with_producers(part, [bytes(16)], 20)
    part.apply_retention(now_ms=0)
    start = part.log_start_offset
    part.close()
    path = snapshot_path(directory, start)
    path.write_bytes(path.read_bytes()[:-3])  # torn
    with caplog.at_level(logging.WARNING):
        part = PartitionLog(directory, RETAIN_NONE)
    assert "shorter" in caplog.text or "CRC32C" in caplog.text
    assert "rebuilt from the log" in caplog.text
    assert part.last_sequence(early) is None  # rebuilt from the headers that remain
    assert part.append(sized_batch(500, 5, producer_id=early, sequence=5)).duplicate is False
    part.close()


def test_garbage_snapshot_is_ignored(tmp_path, caplog):
    directory = tmp_path / "p"
    part = PartitionLog(directory, SMALL)
    fill_with_producers(part, [new_producer_id()], 10)
    part.close()
    snapshot_path(directory, 0).write_bytes(b"\xff" * 100)
    with caplog.at_level(logging.WARNING):
        part = PartitionLog(directory, SMALL)
    assert "CRC32C" in caplog.text and part.log_end_offset == 10
    part.close()


def test_crash_after_the_snapshot_before_the_new_segment(tmp_path, monkeypatch):
    """Snapshot without its segment: the log still ends at its offset, so it stays valid; the
    next roll there overwrites it."""
    directory = tmp_path / "p"
    part = PartitionLog(directory, SMALL)
    pid = new_producer_id()
    fill_with_producers(part, [pid], 8)  # exactly one full segment

    def crashing_create(*args, **kwargs):
        raise SimulatedCrash

    monkeypatch.setattr(LogSegment, "create", crashing_create)
    with pytest.raises(SimulatedCrash):
        part.append(sized_batch(500, 8, producer_id=pid, sequence=8))
    monkeypatch.undo()
    assert snapshot_files(directory) == [8] and not log_path(directory, 8).exists()
    part = PartitionLog(directory, SMALL)
    assert part.log_end_offset == 8 and snapshot_files(directory) == [8]
    assert part.append(sized_batch(500, 8, producer_id=pid, sequence=8)).base_offset == 8
    assert part.segment_base_offsets() == (0, 8)
    at_8 = ProducerStateTable(10)
    at_8.load_snapshot(snapshot_path(directory, 8).read_bytes(), 8)
    assert at_8.last_sequence(pid) == 7
    part.close()


def test_segment_without_its_snapshot_gets_one_when_it_becomes_the_start(tmp_path):
    """A lost snapshot (or a log from before snapshots): retention rebuilds the one at the new
    start from the old start's snapshot plus the headers of the deleted segments."""
    directory = tmp_path / "p"
    part = PartitionLog(directory, RETAIN_NONE)
    early = new_producer_id()
    part.append(sized_batch(500, 0, producer_id=early, sequence=0))
    fill_with_producers(part, [bytes(16)], 20)  # segments 0, 8, 16
    for offset in snapshot_files(directory):
        snapshot_path(directory, offset).unlink()
    before = table_of(part)
    assert part.apply_retention(now_ms=0) == 2
    assert snapshot_files(directory) == [16]
    part.close()
    part = PartitionLog(directory, RETAIN_NONE)
    assert table_of(part) == before
    assert part.append(sized_batch(500, 0, producer_id=early, sequence=0)).duplicate
    part.close()


def test_stale_snapshots_outside_the_log_are_deleted_on_open(tmp_path):
    directory = tmp_path / "p"
    part = PartitionLog(directory, RETAIN_NONE)
    fill_with_producers(part, [new_producer_id()], 20)
    part.apply_retention(now_ms=0)  # starts at 16
    part.close()
    for offset in (3, 8, 500):
        snapshot_path(directory, offset).write_bytes(b"stale")
    (directory / "00000000000000000099.snapshot.tmp").write_bytes(b"half")
    part = PartitionLog(directory, RETAIN_NONE)
    assert snapshot_files(directory) == [16]
    assert not (directory / "00000000000000000099.snapshot.tmp").exists()
    part.close()


# -- truncation and restart -----------------------------------------------------------------


def test_truncation_deletes_snapshots_above_and_rebuilds_as_on_open(tmp_path):
    directory = tmp_path / "p"
    part = PartitionLog(directory, RETAIN_NONE)
    early, late = new_producer_id(), new_producer_id()
    part.append(sized_batch(500, 0, producer_id=early, sequence=0))
    fill_with_producers(part, [bytes(16)], 15)  # segments 0, 8 (snapshot at 8)
    part.apply_retention(now_ms=0)  # starts at 8; the early producer lives in the snapshot
    fill_with_producers(part, [late], 20)  # to 36: segments 8, 16, 24, 32
    assert snapshot_files(directory) == [8, 16, 24, 32]
    part.truncate_to(18)
    assert snapshot_files(directory) == [8, 16]
    assert part.last_sequence(late) == 1  # sequences 0, 1 at offsets 16, 17
    assert part.last_sequence(early) == 0
    expected = table_of(part)
    part.close()
    part = PartitionLog(directory, RETAIN_NONE)
    assert table_of(part) == expected
    part.close()


def test_truncation_to_a_segment_base_keeps_its_snapshot(tmp_path):
    directory = tmp_path / "p"
    part = PartitionLog(directory, SMALL)
    fill_with_producers(part, [new_producer_id()], 20)
    part.truncate_to(16)
    assert snapshot_files(directory) == [8, 16] and part.log_end_offset == 16
    part.close()


@pytest.mark.parametrize("how", ["restart_at", "truncate_below_start"])
def test_emptying_the_log_deletes_every_snapshot_and_the_table(tmp_path, how):
    directory = tmp_path / "p"
    part = PartitionLog(directory, RETAIN_NONE)
    pid = new_producer_id()
    fill_with_producers(part, [pid], 20)
    part.apply_retention(now_ms=0)  # starts at 16
    if how == "restart_at":
        part.restart_at(100)
    else:
        part.truncate_to(5)
    assert snapshot_files(directory) == [] and part.last_sequence(pid) is None
    assert part.append(sized_batch(500, 0, producer_id=pid, sequence=0)).duplicate is False
    part.close()


def test_table_stays_bounded_through_snapshots(tmp_path):
    config = dataclasses.replace(RETAIN_NONE, producer_ids_max=3)
    directory = tmp_path / "p"
    part = PartitionLog(directory, config)
    producers = [new_producer_id() for _ in range(10)]
    fill_with_producers(part, producers, 20)
    part.apply_retention(now_ms=0)
    assert len(part._producers) == 3
    start = part.log_start_offset
    assert len(ProducerStateTable(100).encode_snapshot(0)) < snapshot_path(
        directory, start).stat().st_size <= 22 + 3 * (17 + 5 * 20)
    before = table_of(part)
    part.close()
    part = PartitionLog(directory, config)
    assert table_of(part) == before
    part.close()


def test_random_history_reopens_to_the_same_table(tmp_path):
    rng = random.Random(7)
    config = dataclasses.replace(SMALL, retention_bytes=6000, producer_ids_max=6)
    directory = tmp_path / "p"
    part = PartitionLog(directory, config)
    producers = [new_producer_id() for _ in range(9)]
    next_sequence = dict.fromkeys(producers, 0)
    for step in range(400):
        pid = rng.choice(producers)
        if part.last_sequence(pid) is None:
            next_sequence[pid] = rng.randrange(0, 50)  # forgotten: may restart anywhere
        part.append(sized_batch(rng.randrange(100, 900), step, producer_id=pid,
                                sequence=next_sequence[pid]))
        next_sequence[pid] += 1
        if step % 37 == 0:
            part.apply_retention(now_ms=0)
        if step % 91 == 0:
            expected = table_of(part)
            part.close()
            part = PartitionLog(directory, config)
            assert table_of(part) == expected
    assert part.log_start_offset > 0
    part.close()
