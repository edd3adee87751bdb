"""Compressed Kafka batches (common/kaska/kafka_compression.py) through storage, which reads only
Kaska's header: appended, deduplicated, recovered and read back, although they hold more
records than Kaska's uncompressed bound (4 bytes a record) would let their payload carry."""

import struct

import crc32c
import pytest

from common.kaska.errors import CorruptBatchError
from common.kaska.kafka_compression import KAFKA_RECORD_BYTES_MIN, codec_of
from common.kaska.record_batch import CRC_COVERED_FROM, parse_header
from services.broker.kafka.records import kafka_to_kaska
from services.broker.storage.config import POSITION_MAX
from services.broker.storage.partition import PartitionLog
from tests.unit.broker.kafka.kafka_batches import kafka_batch

from .batches import SMALL, batch, records

ZSTD = 4
RECORDS = 500  # of 20 zero bytes: ~100 bytes of zstd


def compressed(producer_id: int = 7, base_sequence: int = 0) -> bytes:
    return kafka_to_kaska(
        kafka_batch(
            [(None, bytes(20), [])] * RECORDS,
            producer_id=producer_id,
            epoch=0,
            base_sequence=base_sequence,
            compression=ZSTD,
        )
    )


def with_record_count(kaska: bytes, count: int) -> bytes:
    """The batch claiming `count` records, its CRC made to match."""
    out = bytearray(kaska)
    struct.pack_into(">I", out, 24, count)
    struct.pack_into(">I", out, 16, crc32c.crc32c(bytes(out[CRC_COVERED_FROM:])))
    return bytes(out)


@pytest.fixture
def part(tmp_path):
    log = PartitionLog(tmp_path / "p", SMALL)
    yield log
    log.close()


def test_compressed_batch_is_appended_deduplicated_and_recovered(part, tmp_path):
    first = compressed()
    header = parse_header(first)
    assert header.record_count * 4 > header.batch_length  # beyond the uncompressed bound
    assert part.append(first).base_offset == 0
    assert part.append(first).duplicate  # a Kafka producer's retry
    # Its next batch follows at base sequence + record count, as Kafka numbers them.
    assert part.append(compressed(base_sequence=RECORDS)).base_offset == RECORDS
    part.close()

    reopened = PartitionLog(tmp_path / "p", SMALL)
    try:
        assert reopened.log_end_offset == 2 * RECORDS
        assert reopened.append(first).duplicate  # the producer table, rebuilt from the log
        stored = reopened.read_bytes(0, 10**6)
        assert records(stored) == [(offset, bytes(20)) for offset in range(2 * RECORDS)]
        assert codec_of(parse_header(stored).attributes) == ZSTD
    finally:
        reopened.close()


def test_record_count_bounds_still_hold(part):
    bound = POSITION_MAX // KAFKA_RECORD_BYTES_MIN
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        part.append(with_record_count(compressed(), bound + 1))
    # An uncompressed batch keeps its 4-bytes-a-record bound.
    plain = batch(b"a", b"b")
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        part.append(with_record_count(plain, 100))
    assert part.log_end_offset == 0
