"""MESSAGE_LENGTH's walk over the record lengths of one stamped batch."""

import pytest

from common.kaska.errors import CorruptBatchError, OffsetOutOfRangeError
from common.kaska.kafka_compression import InflatedTooLargeError
from common.kaska.record_batch import encode_batch, stamp
from services.broker.handlers.message_length import record_length_at
from services.broker.kafka.records import kafka_to_kaska
from tests.unit.broker.kafka.kafka_batches import kafka_batch

INFLATED_BYTES_MAX = 1 << 20


def _stamped(records, base_offset):
    batch = bytearray(encode_batch(records))
    stamp(batch, base_offset, 0)
    return bytes(batch)


def test_length_of_each_record():
    batch = _stamped([b"a", b"", b"xyz" * 100], base_offset=40)
    assert [record_length_at(batch, o, INFLATED_BYTES_MAX) for o in (40, 41, 42)] == [1, 0, 300]


def test_offset_outside_the_batch_is_refused():
    batch = _stamped([b"a"], base_offset=40)
    for offset in (39, 41):
        with pytest.raises(OffsetOutOfRangeError):
            record_length_at(batch, offset, INFLATED_BYTES_MAX)


def test_record_running_past_the_batch_is_corrupt():
    batch = bytearray(_stamped([b"abcd"], base_offset=0))
    batch[60:64] = (1000).to_bytes(4, "big")
    with pytest.raises(CorruptBatchError):
        record_length_at(bytes(batch), 0, INFLATED_BYTES_MAX)


def test_length_of_a_kafka_record_is_its_values():
    batch = bytearray(kafka_to_kaska(kafka_batch([(b"key", b"value", [("h", b"x")]),
                                                  (None, None, [])])))
    stamp(batch, 10, 0)
    assert [record_length_at(bytes(batch), o, INFLATED_BYTES_MAX) for o in (10, 11)] == [5, 0]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_length_of_a_compressed_kafka_record_is_its_inflated_values(codec):
    batch = bytearray(kafka_to_kaska(kafka_batch([(b"key", b"value" * 50, []), (None, None, [])],
                                                 compression=codec)))
    stamp(batch, 10, 0)
    assert [record_length_at(bytes(batch), o, INFLATED_BYTES_MAX) for o in (10, 11)] == [250, 0]


def test_compressed_batch_inflating_past_the_bound_is_refused():
    batch = bytearray(kafka_to_kaska(kafka_batch([(None, bytes(10_000), [])], compression=4)))
    stamp(batch, 0, 0)
    with pytest.raises(InflatedTooLargeError):
        record_length_at(bytes(batch), 0, 1000)
