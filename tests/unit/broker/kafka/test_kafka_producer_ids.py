"""Kafka's (producer id, epoch, base sequence) on Kaska's producer id and sequence: the mapping
(producer_ids.py) and the producer table's dedup for such ids (storage/producer_state.py)."""

import random
import uuid

import pytest

from common.kaska.errors import DuplicateSequenceError, OutOfOrderSequenceError
from common.kaska.record_batch import NO_PRODUCER, parse_header
from services.broker.kafka.producer_ids import (
    PRODUCER_EPOCH_MAX,
    kafka_producer,
    kaska_producer_id,
    next_identity,
)
from services.broker.kafka.records import kafka_to_kaska
from services.broker.storage.producer_state import KAFKA_SEQUENCE_MODULUS, ProducerStateTable

from .kafka_batches import kafka_batch


@pytest.mark.parametrize("producer_id, epoch", [(0, 0), (1, 7), ((1 << 63) - 1, 32767)])
def test_identity_round_trips(producer_id, epoch):
    kaska = kaska_producer_id(producer_id, epoch)
    assert len(kaska) == 16
    assert kafka_producer(kaska, 123) == (producer_id, epoch, 123)


def test_no_kafka_producer_is_no_kaska_producer():
    assert kaska_producer_id(-1, -1) == NO_PRODUCER


def test_a_uuid4_is_never_taken_for_a_kafka_producer():
    for _ in range(1000):
        assert kafka_producer(uuid.uuid4().bytes, 5) == (-1, -1, -1)
    # Byte 6 holds a UUID's version nibble: 4 for the ids Kaska producers draw, 0 here.
    assert kaska_producer_id(5, 1)[6] == 0


def test_new_identity_is_random_at_epoch_zero():
    rng = random.Random(1)
    first, second = next_identity(rng, -1, -1), next_identity(rng, -1, -1)
    assert first[1] == second[1] == 0 and first[0] != second[0]
    assert 0 <= first[0] < 1 << 62


def test_epoch_bump_keeps_the_id():
    assert next_identity(random.Random(1), 42, 3) == (42, 4)


def test_exhausted_epoch_gets_a_new_id():
    producer_id, epoch = next_identity(random.Random(1), 42, PRODUCER_EPOCH_MAX)
    assert epoch == 0 and producer_id != 42


def header(base_sequence, count=1, producer_id=9, epoch=0):
    return parse_header(kafka_to_kaska(kafka_batch(
        [(None, b"v", [])] * count, producer_id=producer_id, epoch=epoch,
        base_sequence=base_sequence)))


def test_kafka_sequences_count_records():
    table = ProducerStateTable(100)
    table.record(header(0, count=5), 0)
    assert table.check(header(5, count=2)) is None
    with pytest.raises(OutOfOrderSequenceError, match="expected 5"):
        table.check(header(1))


def test_retried_kafka_batch_is_answered_with_its_original_offset():
    table = ProducerStateTable(100)
    table.record(header(0, count=5), 100)
    table.record(header(5, count=2), 105)
    original = table.check(header(5, count=2))
    assert (original.base_offset, original.record_count) == (105, 2)


def test_forgotten_old_sequence_is_a_duplicate():
    table = ProducerStateTable(100)
    for n in range(10):  # more than the table remembers per producer
        table.record(header(n), n)
    with pytest.raises(DuplicateSequenceError):
        table.check(header(0))


def test_kafka_sequence_wraps_like_kafkas_int32():
    table = ProducerStateTable(100)
    table.record(header(KAFKA_SEQUENCE_MODULUS - 2, count=2), 0)
    assert table.check(header(0)) is None


def test_new_epoch_starts_its_sequences_again():
    table = ProducerStateTable(100)
    table.record(header(0, count=5, epoch=0), 0)
    assert table.check(header(0, epoch=1)) is None
