"""PartitionLog recovery from damaged directories."""

import logging
import os

import pytest

from services.broker.storage.partition import PartitionLog
from services.broker.storage.segment import DATA_START, log_path

from .batches import SMALL, batch, new_producer_id, records, sized_batch

SEGMENT_BATCHES = 8  # 500-byte batches per 4 KiB segment


def offsets(part: PartitionLog) -> list[int]:
    return [offset for offset, _ in records(part.read_bytes(part.log_start_offset, 10**7))]


@pytest.fixture
def directory(tmp_path):
    """A partition of 3 full segments and a 4th with 4 batches, closed."""
    path = tmp_path / "p"
    part = PartitionLog(path, SMALL)
    for i in range(3 * SEGMENT_BATCHES + 4):
        part.append(sized_batch(500, i))
    part.close()
    return path


def reopen(directory):
    return PartitionLog(directory, SMALL)


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))


def test_clean_reopen_keeps_everything(directory):
    part = reopen(directory)
    assert offsets(part) == list(range(28))
    assert part.segment_base_offsets() == (0, 8, 16, 24)
    part.close()


def test_empty_directory_starts_at_zero(tmp_path):
    part = PartitionLog(tmp_path / "new", SMALL)
    assert (part.log_start_offset, part.log_end_offset) == (0, 0)
    assert (tmp_path / "new" / "00000000000000000000.log").exists()
    part.close()


def test_torn_tail_of_the_active_segment_is_cut(directory):
    with open(log_path(directory, 24), "r+b") as f:
        f.seek(DATA_START + 4 * 500)
        f.write(sized_batch(500, 99)[:300])
    part = reopen(directory)
    assert part.log_end_offset == 28
    assert part.append(batch(b"next")).base_offset == 28
    assert offsets(part) == list(range(29))
    part.close()


def test_crc_flip_in_a_middle_segment_truncates_the_log_there(directory, caplog):
    flip_byte(log_path(directory, 8), DATA_START + 3 * 500 + 100)  # batch 11
    with caplog.at_level(logging.WARNING):
        part = reopen(directory)
    assert "CRC32C mismatch" in caplog.text and "deleting the 2 segment(s)" in caplog.text
    assert part.log_end_offset == 11 and part.segment_base_offsets() == (0, 8)
    assert not log_path(directory, 16).exists() and not log_path(directory, 24).exists()
    assert part.append(sized_batch(500, 11)).base_offset == 11
    assert offsets(part) == list(range(12))
    part.close()


def test_file_without_magic_is_skipped_with_a_warning(directory, caplog):
    with open(log_path(directory, 0), "r+b") as f:
        f.write(b"JUNK")
    with caplog.at_level(logging.WARNING):
        part = reopen(directory)
    assert "no b'KASK' magic" in caplog.text
    assert part.log_start_offset == 8 and offsets(part) == list(range(8, 28))
    aside = [p.name for p in directory.iterdir() if ".unreadable." in p.name]
    assert len(aside) == 1 and aside[0].startswith("00000000000000000000.log")
    part.close()
    part = reopen(directory)  # the renamed file stays aside quietly
    assert part.log_start_offset == 8
    part.close()


def test_zero_length_segment_in_the_middle_ends_the_log(directory, caplog):
    os.truncate(log_path(directory, 16), 0)
    with caplog.at_level(logging.WARNING):
        part = reopen(directory)
    assert "shorter than the segment header" in caplog.text
    assert part.log_end_offset == 16 and part.segment_base_offsets() == (0, 8)
    part.close()


def test_missing_and_garbage_indexes_are_rebuilt(directory):
    (directory / "00000000000000000008.index").unlink()
    (directory / "00000000000000000016.index").write_bytes(os.urandom(21))
    part = reopen(directory)
    for offset in (9, 13, 17, 22):
        assert records(part.read_bytes(offset, 1))[0][0] == offset
    part.close()


def test_leftovers_are_removed_and_strangers_left_alone(directory, caplog):
    (directory / "00000000000000000099.log.tmp").write_bytes(b"half")
    (directory / "00000000000000000077.index").write_bytes(bytes(8))
    (directory / "notes.txt").write_text("hi")
    with caplog.at_level(logging.WARNING):
        part = reopen(directory)
    assert not (directory / "00000000000000000099.log.tmp").exists()
    assert not (directory / "00000000000000000077.index").exists()
    assert (directory / "notes.txt").exists() and "notes.txt: not a segment" in caplog.text
    assert part.log_end_offset == 28
    part.close()


def test_sealed_segment_left_untrimmed_by_a_crash_is_trimmed(directory):
    os.truncate(log_path(directory, 0), SMALL.segment_bytes_max)
    part = reopen(directory)
    assert os.path.getsize(log_path(directory, 0)) == DATA_START + 8 * 500
    assert offsets(part) == list(range(28))
    part.close()


def test_producer_table_survives_reopen_across_segments(tmp_path):
    pid = new_producer_id()
    part = PartitionLog(tmp_path / "p", SMALL)
    for seq in range(20):
        part.append(sized_batch(500, seq, producer_id=pid, sequence=seq))
    part.close()
    part = PartitionLog(tmp_path / "p", SMALL)
    retry = part.append(sized_batch(500, 18, producer_id=pid, sequence=18))
    assert (retry.base_offset, retry.duplicate) == (18, True)
    assert part.last_sequence(pid) == 19
    part.close()
