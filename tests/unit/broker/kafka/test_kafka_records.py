"""Transcoding RecordBatch v2 <-> Kaska batches (services/broker/kafka/records.py), checked
against kafka-python's record codec, and Kaska's consumer view of Kafka records."""

import struct

import pytest

from common.kaska.errors import CorruptBatchError, MessageTooLargeError
from common.kaska.kafka_compression import CODEC_NAMES, codec_attributes
from common.kaska.kafka_record import ATTR_KAFKA_RECORDS, encode_varint
from common.kaska.record_batch import (
    HEADER_BYTES,
    encode_batch,
    iter_records,
    parse_header,
    stamp,
    validate,
)
from services.broker.kafka import records as records_module
from services.broker.kafka.errors import (
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    UnsupportedRecordsError,
)
from services.broker.kafka.producer_ids import kaska_producer_id
from services.broker.kafka.records import (
    kafka_to_kaska,
    kafka_to_kaska_parts,
    kaska_to_kafka,
    kaska_to_kafka_parts,
)
from tests.conftest import running_in_ci

from .kafka_batches import BASE_TIMESTAMP_MS, kafka_batch, read_kafka, recrc

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
RECORDS = [(b"k0", b"v0", [("h", b"x")]), (None, b"v1", []), (b"k2", None, [("a", None)]),
           (b"", b"v" * 300, [("h1", b"1"), ("h2", b"2")])]


def stored(kaska: bytes, base_offset: int = 40, epoch: int = 3) -> bytearray:
    """The batch as the leader stamps it into the log."""
    out = bytearray(kaska)
    stamp(out, base_offset, epoch)
    return out


def test_kafka_batch_survives_the_round_trip_through_the_log():
    original = kafka_batch(RECORDS, producer_id=77, epoch=2, base_sequence=9)
    kaska = stored(kafka_to_kaska(original))
    header = validate(kaska)
    assert header.attributes == ATTR_KAFKA_RECORDS
    assert header.record_count == len(RECORDS)
    assert header.producer_id == kaska_producer_id(77, 2) and header.sequence == 9
    assert header.timestamp_ms == BASE_TIMESTAMP_MS

    parsed, records = read_kafka(kaska_to_kafka(kaska, header))
    assert (parsed.base_offset, parsed.producer_id, parsed.producer_epoch,
            parsed.base_sequence) == (40, 77, 2, 9)
    assert parsed.leader_epoch == 3
    assert parsed.max_timestamp == BASE_TIMESTAMP_MS + 10 * (len(RECORDS) - 1)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (40 + i, key, value, headers, BASE_TIMESTAMP_MS + 10 * i)
        for i, (key, value, headers) in enumerate(RECORDS)]


@pytest.mark.parametrize("walk", ["native", "python"])
@pytest.mark.parametrize("compressed", [False, True])
def test_parts_written_one_after_the_other_are_one_checksummed_batch(walk, compressed,
                                                                     monkeypatch):
    """The broker writes (header, records) into the log and onto the socket separately: the
    header's CRC must cover both, in each direction, whichever walk made the records."""
    if walk == "python":
        monkeypatch.setattr(records_module, "native", None)
    elif records_module.native is None:
        # As test_record_walk_native.py: CI requires the built walk, so it fails there.
        if running_in_ci():
            pytest.fail("the C walk (_record_walk) is not built: make build")
        pytest.skip("the C walk is not built here (make build)")
    original = kafka_batch(RECORDS, producer_id=5, epoch=1, base_sequence=0,
                           compression=GZIP if compressed else 0)
    header, records = kafka_to_kaska_parts(original)
    kaska = stored(header + bytes(records))
    assert validate(kaska).record_count == len(RECORDS)
    kaska[-1] ^= 0x01
    with pytest.raises(CorruptBatchError):
        validate(kaska)
    kaska[-1] ^= 0x01

    kafka_header, kafka_records = kaska_to_kafka_parts(kaska, parse_header(kaska))
    _parsed, records_read = read_kafka(kafka_header + bytes(kafka_records))
    assert [(r.key, r.value) for r in records_read] == [(k, v) for k, v, _h in RECORDS]


def test_kaska_consumer_reads_the_values_of_kafka_records():
    kaska = stored(kafka_to_kaska(kafka_batch(RECORDS)))
    assert list(iter_records(kaska)) == [(40, b"v0"), (41, b"v1"), (42, b""), (43, b"v" * 300)]


def test_non_idempotent_kafka_batch_has_no_producer():
    header = parse_header(kafka_to_kaska(kafka_batch(RECORDS[:1])))
    assert not header.idempotent and header.sequence == -1


def test_kaska_batch_reads_as_kafka_records_with_null_keys():
    values = [b"a", b"", b"c" * 1000]
    kaska = stored(encode_batch(values, producer_id=b"\x11" * 16, sequence=5,
                                timestamp_ms=BASE_TIMESTAMP_MS))
    parsed, records = read_kafka(kaska_to_kafka(kaska, parse_header(kaska)))
    # A Kaska producer has no Kafka identity.
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (-1, -1, -1)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (40 + i, None, value, [], BASE_TIMESTAMP_MS) for i, value in enumerate(values)]


def test_corrupt_crc_is_refused():
    batch = bytearray(kafka_batch(RECORDS))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        kafka_to_kaska(bytes(batch))


@pytest.mark.parametrize("cut", [0, 10, 60, 70])
def test_truncated_batch_is_refused(cut):
    with pytest.raises(CorruptBatchError):
        kafka_to_kaska(kafka_batch(RECORDS)[:cut])


def test_two_batches_in_one_partition_are_refused():
    with pytest.raises(UnsupportedRecordsError) as caught:
        kafka_to_kaska(kafka_batch(RECORDS) + kafka_batch(RECORDS))
    assert caught.value.kafka_code == INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_is_stored_and_served_as_the_producer_sent_it(codec):
    original = kafka_batch(RECORDS, producer_id=77, epoch=2, base_sequence=9, compression=codec)
    kaska = stored(kafka_to_kaska(original))
    header = validate(kaska)
    assert header.attributes == codec_attributes(codec)
    assert (header.record_count, header.sequence) == (len(RECORDS), 9)
    assert header.producer_id == kaska_producer_id(77, 2)
    assert header.timestamp_ms == BASE_TIMESTAMP_MS
    # Kept compressed: the Kafka batch from its CRC on is the Kaska payload, byte for byte.
    assert bytes(kaska[HEADER_BYTES:]) == original[17:]

    served = kaska_to_kafka(kaska, header)
    assert served[17:] == original[17:]  # the producer's CRC, attributes and records
    parsed, records = read_kafka(served)
    assert (parsed.base_offset, parsed.leader_epoch, parsed.compression_type) == (40, 3, codec)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (40 + i, key, value, headers, BASE_TIMESTAMP_MS + 10 * i)
        for i, (key, value, headers) in enumerate(RECORDS)]
    # Kaska's consumers inflate it on their side.
    assert list(iter_records(kaska)) == [(40, b"v0"), (41, b"v1"), (42, b""), (43, b"v" * 300)]


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_records_inflating_past_the_bound_are_too_large(codec):
    bomb = kafka_batch([(None, bytes(100_000), [])], compression=codec)
    assert len(bomb) < 6000
    with pytest.raises(MessageTooLargeError):
        kafka_to_kaska(bomb, records_bytes_max=50_000)
    # One byte of room more than the records need is enough.
    assert parse_header(kafka_to_kaska(bomb, records_bytes_max=100_100)).record_count == 1


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_records_that_do_not_inflate_are_corrupt(codec):
    batch = bytearray(kafka_batch(RECORDS, compression=codec))
    batch[70:] = b"\xff" * (len(batch) - 70)  # the compressed records, past the codec's magic
    with pytest.raises(CorruptBatchError, match=CODEC_NAMES[codec]):
        kafka_to_kaska(recrc(batch))


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_with_a_wrong_record_count_is_corrupt(codec):
    batch = bytearray(kafka_batch(RECORDS, compression=codec))
    struct.pack_into(">i", batch, 57, len(RECORDS) - 1)  # recordCount
    struct.pack_into(">i", batch, 23, len(RECORDS) - 2)  # lastOffsetDelta, to match it
    with pytest.raises(CorruptBatchError):
        kafka_to_kaska(recrc(batch))


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_with_a_bad_crc_is_corrupt(codec):
    batch = bytearray(kafka_batch(RECORDS, compression=codec))
    batch[-1] ^= 0x01
    with pytest.raises(CorruptBatchError, match="CRC"):
        kafka_to_kaska(bytes(batch))


def test_uncompressed_records_labelled_compressed_are_corrupt():
    batch = bytearray(kafka_batch(RECORDS))
    struct.pack_into(">h", batch, 21, ZSTD)  # attributes: just the codec bits
    with pytest.raises(CorruptBatchError, match="zstd"):
        kafka_to_kaska(recrc(batch))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_refused_with_their_code(codec):
    batch = bytearray(kafka_batch(RECORDS))
    struct.pack_into(">h", batch, 21, codec)
    with pytest.raises(UnsupportedRecordsError) as caught:
        kafka_to_kaska(recrc(batch))
    assert caught.value.kafka_code == UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", CODECS)
def test_stored_compressed_batch_that_disagrees_with_its_header_is_not_served(codec):
    kaska = stored(kafka_to_kaska(kafka_batch(RECORDS, compression=codec)))
    header = parse_header(kaska)
    struct.pack_into(">I", kaska, 24, len(RECORDS) + 1)  # the Kaska record count
    with pytest.raises(CorruptBatchError, match="stored Kafka batch"):
        kaska_to_kafka(kaska, parse_header(kaska))
    with pytest.raises(CorruptBatchError, match="stored Kafka batch"):
        list(iter_records(kaska))
    assert header.record_count == len(RECORDS)


def test_transactional_batch_is_refused():
    with pytest.raises(UnsupportedRecordsError) as caught:
        kafka_to_kaska(kafka_batch(RECORDS, producer_id=1, epoch=0, base_sequence=0,
                                   transactional=True))
    assert caught.value.kafka_code == INVALID_RECORD


def test_old_magic_is_refused():
    batch = bytearray(kafka_batch(RECORDS))
    batch[16] = 1
    with pytest.raises(UnsupportedRecordsError) as caught:
        kafka_to_kaska(bytes(batch))
    assert caught.value.kafka_code == UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_record_offset_deltas_must_be_dense():
    batch = bytearray(kafka_batch([(None, b"x", [])]))
    # The one record: length varint at 61, attributes at 62, timestamp delta 0 at 63, then
    # its offset delta at 64 (0); 1 is zigzag -1, a well-formed but wrong delta.
    assert batch[64] == 0
    batch[64] = 1
    with pytest.raises(CorruptBatchError, match="offset delta"):
        kafka_to_kaska(recrc(batch))


def test_record_field_running_past_its_record_is_refused():
    batch = bytearray(kafka_batch([(None, b"xyz", [])]))
    value_length_at = 66  # after length, attributes, ts delta, offset delta, null key
    assert batch[value_length_at] == encode_varint(3)[0]
    batch[value_length_at] = encode_varint(40)[0]
    with pytest.raises(CorruptBatchError):
        kafka_to_kaska(recrc(batch))


def test_record_count_must_match_the_last_offset_delta():
    batch = bytearray(kafka_batch(RECORDS))
    struct.pack_into(">i", batch, 57, len(RECORDS) + 1)
    with pytest.raises(CorruptBatchError, match="record count"):
        kafka_to_kaska(recrc(batch))


def test_idempotent_batch_needs_a_sequence():
    batch = bytearray(kafka_batch(RECORDS, producer_id=5, epoch=0, base_sequence=0))
    struct.pack_into(">i", batch, 53, -1)
    with pytest.raises(CorruptBatchError, match="sequence"):
        kafka_to_kaska(recrc(batch))
