"""Kafka's record body as Kaska stores it (common/kaska/kafka_record.py): varints and the walk."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from common.kaska.errors import CorruptBatchError
from common.kaska.kafka_record import (
    check_record,
    encode_value_record,
    encode_varint,
    read_varint,
    record_value,
)

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@given(INT64)
def test_varint_matches_kafka_pythons(value):
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert encode_varint(value) == bytes(theirs)
    assert read_varint(theirs + b"tail", 0) == (value, len(theirs))
    assert decode_varint(encode_varint(value), 0) == (value, len(theirs))


def test_truncated_varint_is_corrupt():
    with pytest.raises(CorruptBatchError, match="past the end"):
        read_varint(b"\x80\x80", 0)


def test_endless_varint_is_corrupt():
    with pytest.raises(CorruptBatchError, match="longer than"):
        read_varint(b"\xff" * 11, 0)


@given(st.integers(min_value=0, max_value=1 << 20), st.binary(max_size=300))
def test_value_record_walks_and_reads_back(offset_delta, value):
    body = encode_value_record(offset_delta, value)
    assert check_record(body, offset_delta) == 0
    assert record_value(body) == value


def test_bytes_after_the_last_header_are_corrupt():
    with pytest.raises(CorruptBatchError, match="end at byte"):
        check_record(encode_value_record(0, b"v") + b"\x00", 0)


def test_negative_header_count_is_corrupt():
    body = encode_value_record(0, b"v")[:-1] + encode_varint(-2)
    with pytest.raises(CorruptBatchError, match="header count"):
        check_record(body, 0)


def test_empty_record_is_corrupt():
    with pytest.raises(CorruptBatchError):
        check_record(b"", 0)
