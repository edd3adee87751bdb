"""The record batch format: round trips, in-place stamping, and every kind of corruption."""

import struct

import pytest

from common.kaska import record_batch as rb
from common.kaska.errors import CorruptBatchError

PRODUCER = bytes(range(16))


def _batch(records=(b"alpha", b"", b"gamma" * 10), sequence=7):
    return bytearray(rb.encode_batch(list(records), producer_id=PRODUCER, sequence=sequence,
                                     timestamp_ms=1234))


def test_round_trip_keeps_every_field_and_record():
    batch = _batch()
    header = rb.validate(batch)
    assert (header.record_count, header.producer_id, header.sequence) == (3, PRODUCER, 7)
    assert header.timestamp_ms == 1234 and header.total_bytes == len(batch)
    assert list(rb.iter_records(batch)) == [(0, b"alpha"), (1, b""), (2, b"gamma" * 10)]


def test_stamp_sets_offset_and_epoch_without_breaking_crc():
    batch = _batch()
    rb.stamp(batch, base_offset=1_000_000, leader_epoch=4)
    header = rb.validate(batch)
    stamped = (header.base_offset, header.leader_epoch, header.next_offset)
    assert stamped == (1_000_000, 4, 1_000_003)
    assert [o for o, _ in rb.iter_records(batch)] == [1_000_000, 1_000_001, 1_000_002]


@pytest.mark.parametrize("position", [20, 30, 50, 61, -1])
def test_any_flipped_covered_byte_fails_the_crc(position):
    batch = _batch()
    batch[position] ^= 0x40
    with pytest.raises(CorruptBatchError):
        rb.validate(batch)


def test_truncated_batch_is_corrupt_and_iter_batches_stops_before_it():
    whole = bytes(_batch())
    with pytest.raises(CorruptBatchError):
        rb.validate(whole[:-1])
    with pytest.raises(CorruptBatchError):
        rb.parse_header(whole[:rb.HEADER_BYTES - 1])
    batches = list(rb.iter_batches(whole + whole[:-5]))
    assert len(batches) == 1 and bytes(batches[0][1]) == whole


def test_header_sanity_checks():
    batch = _batch()
    struct.pack_into(">H", batch, 20, 99)
    with pytest.raises(CorruptBatchError, match="version"):
        rb.parse_header(batch)
    batch = _batch()
    struct.pack_into(">I", batch, 8, 3)
    with pytest.raises(CorruptBatchError, match="below the header"):
        rb.parse_header(batch)
    batch = _batch()
    struct.pack_into(">I", batch, 24, 0)
    with pytest.raises(CorruptBatchError, match="no records"):
        rb.parse_header(batch)


def test_record_count_larger_than_records_is_detected_when_iterating():
    batch = _batch(records=(b"a", b"b"))
    struct.pack_into(">I", batch, 24, 3)
    header = rb.parse_header(batch)
    with pytest.raises(CorruptBatchError):
        list(rb.iter_records(batch, header))


def test_encode_rejects_programmer_errors():
    with pytest.raises(ValueError):
        rb.encode_batch([])
    with pytest.raises(ValueError):
        rb.encode_batch([b"x"], producer_id=b"short")


def test_non_idempotent_default():
    header = rb.validate(rb.encode_batch([b"x"]))
    assert not header.idempotent and header.sequence == rb.NO_SEQUENCE
