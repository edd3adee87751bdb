"""The C record loops (services/broker/kafka/_record_walk.c) against their Python oracle in
records.py: byte-equal output on valid batches, and the same verdict (stored or refused) on
damaged ones -- truncated, bytes flipped, lengths forged, varints too long or too wide. Hostile
frames reach this code straight from the network, so the damage is random, not picked."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.kaska.errors import CorruptBatchError
from common.kaska.kafka_record import encode_varint
from common.kaska.record_batch import encode_batch, parse_header, stamp
from services.broker.kafka import records
from tests.conftest import running_in_ci

from .kafka_batches import kafka_batch

pytestmark = pytest.mark.skipif(records.native is None and not running_in_ci(),
                                reason="the C extension is not built (make build builds it)")

HEADER = records.KAFKA_HEADER_BYTES
keys_and_values = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), keys_and_values), max_size=3)
kafka_records = st.lists(st.tuples(keys_and_values, keys_and_values, headers), min_size=1,
                         max_size=30)


def test_ci_runs_the_c_loops():
    """`make build` compiles the extension; in CI a missing one must fail, not fall back."""
    assert records.native is not None, "services/broker/kafka/_record_walk.c was not built"


def produce_walk(walk, body: bytes, count: int):
    """(output, None) or (None, "refused") from one implementation of the produce walk."""
    try:
        return bytes(walk(memoryview(body), count)), None
    except CorruptBatchError:
        return None, "refused"


def native_produce_walk(view: memoryview, count: int):
    try:
        return records.native.kaska_records(view, HEADER, count)
    except ValueError as exc:
        raise CorruptBatchError(str(exc)) from None


def same_produce_verdict(body: bytes, count: int) -> None:
    assert produce_walk(native_produce_walk, body, count) == \
        produce_walk(records._kaska_records_py, body, count)


@settings(max_examples=300, deadline=None)
@given(kafka_records)
def test_valid_batches_walk_to_the_same_bytes(batch_records):
    body = kafka_batch(batch_records)
    out, refused = produce_walk(native_produce_walk, body, len(batch_records))
    assert refused is None
    assert out == bytes(records._kaska_records_py(memoryview(body), len(batch_records)))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kafka_records, st.data())
def test_damaged_batches_get_the_same_verdict(batch_records, data):
    body = bytearray(kafka_batch(batch_records))
    count = len(batch_records)
    damage = data.draw(st.sampled_from(["flip", "truncate", "extend", "count"]))
    if damage == "flip":  # any byte of the records, to any value
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(HEADER, len(body) - 1))
            body[at] = data.draw(st.integers(0, 255))
    elif damage == "truncate":
        del body[data.draw(st.integers(HEADER, len(body) - 1)):]
    elif damage == "extend":
        body += data.draw(st.binary(min_size=1, max_size=20))
    else:
        count = data.draw(st.integers(0, 2 * count + 2))
    same_produce_verdict(bytes(body), count)


@pytest.mark.parametrize("varint", [
    b"\xff" * 9 + b"\x01",  # the widest 64-bit value: fine as a length only if it fits
    b"\xff" * 9 + b"\x02",  # 65 bits
    b"\xff" * 10,  # no end within 10 bytes
    b"\x80" * 9,  # runs past the batch
    b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x00",  # a padded 10-byte encoding of -1
])
def test_overlong_and_overwide_varints_get_the_same_verdict(varint):
    record = b"\x00" + varint + b"\x00\x01\x01\x00"  # attributes, timestamp delta, offset 0,..
    body = bytes(HEADER) + encode_varint(len(record)) + record
    same_produce_verdict(body, 1)
    same_produce_verdict(bytes(HEADER) + varint + record, 1)  # as the record's length


def stored_batch(values, kafka_bodies: bool) -> tuple[bytearray, object]:
    if kafka_bodies:
        batch = bytearray(records.kafka_to_kaska(kafka_batch(values)))
    else:
        batch = bytearray(encode_batch([value or b"" for _key, value, _headers in values]))
    stamp(batch, 40, 3)
    return batch, parse_header(batch)


def fetch_walk(walk, view, header):
    try:
        return walk(view, header), None
    except CorruptBatchError:
        return None, "refused"


def native_fetch_walk(view, header):
    try:
        return tuple(records.native.kafka_records(
            view, records.HEADER_BYTES, header.total_bytes, header.record_count,
            bool(header.attributes & records.ATTR_KAFKA_RECORDS)))
    except ValueError as exc:
        raise CorruptBatchError(str(exc)) from None


def python_fetch_walk(view, header):
    return records._kafka_records_py(view, header,
                                     bool(header.attributes & records.ATTR_KAFKA_RECORDS))


@settings(max_examples=300, deadline=None)
@given(kafka_records, st.booleans())
def test_stored_batches_reframe_to_the_same_kafka_records(batch_records, kafka_bodies):
    batch, header = stored_batch(batch_records, kafka_bodies)
    native, refused = fetch_walk(native_fetch_walk, memoryview(batch), header)
    assert refused is None
    assert native == python_fetch_walk(memoryview(batch), header)


@settings(max_examples=300, deadline=None)
@given(kafka_records, st.booleans(), st.data())
def test_damaged_stored_batches_get_the_same_verdict(batch_records, kafka_bodies, data):
    """Stored batches are CRC-checked before they are served; this holds without that too."""
    batch, header = stored_batch(batch_records, kafka_bodies)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(records.HEADER_BYTES, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    view = memoryview(bytes(batch))
    assert fetch_walk(native_fetch_walk, view, header) == \
        fetch_walk(python_fetch_walk, view, header)
