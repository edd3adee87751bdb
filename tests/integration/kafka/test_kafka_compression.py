"""Compressed batches from real Kafka producers -- gzip, snappy, lz4 and zstd from confluent-kafka
(librdkafka) and from kafka-python -- stored and served compressed: each Kafka consumer gets
the producer's keys, values, headers and offsets, Kaska's own consumer the values, and the
batches on the wire and on disk carry the codec. Bad compressed batches are refused and
counted; the broker serves on."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatch

from common.kaska import Consumer as KaskaConsumer
from common.kaska.kafka_compression import CODEC_NAMES, codec_of
from common.kaska.record_batch import iter_batches
from tests.integration.kafka.clients import (
    CLIENT_TIMEOUT_S,
    consume,
    create_topic,
    kafka_consumer,
    kaska_read,
)
from tests.integration.kafka.kafka_broker import kafka_request, wait_for
from tests.integration.kafka.test_kafka_hostile_input import kafka_answers, still_serves
from tests.unit.broker.kafka.kafka_batches import kafka_batch, recrc

pytestmark = pytest.mark.integration

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = 400
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
XERIAL_MAGIC = b"\x82SNAPPY\x00"


def records_of(codec: str) -> list[tuple[bytes | None, bytes | None, list]]:
    """(key, value, headers): compressible values, a null key, a null value, a header."""
    out = []
    for i in range(RECORDS):
        key = None if i % 7 == 0 else f"key-{i % 13}".encode()
        value = None if i == 5 else f"{codec} record {i:05d} ".encode() * 20
        out.append((key, value, [("n", str(i).encode()), ("codec", codec.encode())]))
    return out


def produce_confluent(bootstrap: str, topic: str, codec: str, records) -> None:
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 20,
        }
    )
    errors = []
    for key, value, headers in records:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            partition=0,
            on_delivery=lambda error, _m: error and errors.append(error),
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and not errors, errors[:3]


def produce_kafka_python(bootstrap: str, topic: str, codec: str, records) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        compression_type=codec,
        linger_ms=20,
    )
    try:
        futures = [
            producer.send(topic, key=key, value=value, headers=headers, partition=0)
            for key, value, headers in records
        ]
        producer.flush(CLIENT_TIMEOUT_S)
        offsets = [future.get(CLIENT_TIMEOUT_S).offset for future in futures]
    finally:
        producer.close()
    assert offsets == list(range(len(records)))


PRODUCERS = {"confluent-kafka": produce_confluent, "kafka-python": produce_kafka_python}


def read_confluent(bootstrap: str, topic: str, count: int) -> list:
    consumer = kafka_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        return consume(
            consumer,
            count,
            lambda m: (m.offset(), m.key(), m.value(), m.headers() or []),
        )
    finally:
        consumer.close()


def read_kafka_python(bootstrap: str, topic: str, count: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    got: list = []
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        wait_for(
            lambda: (
                got.extend(record for records in consumer.poll(200).values() for record in records)
                or len(got) >= count
            ),
            f"{count} records through kafka-python",
        )
    finally:
        consumer.close()
    return [(r.offset, r.key, r.value, list(r.headers)) for r in got[:count]]


def fetched_batches(bootstrap: str, topic: str) -> list[DefaultRecordBatch]:
    """The Kafka batches of partition 0 from offset 0, as a raw Fetch answers them."""
    Topic = FetchRequest.FetchTopic
    request = FetchRequest[12](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        forgotten_topics_data=[],
        topics=[
            Topic(
                topic=topic,
                partitions=[
                    Topic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 24,
                    )
                ],
            )
        ],
    )
    response = kafka_request(bootstrap, request)
    records = response.responses[0].partitions[0].records
    batches, pos = [], 0
    while pos < len(records):
        length = int.from_bytes(records[pos + 8 : pos + 12], "big")
        batches.append(DefaultRecordBatch(bytes(records[pos : pos + 12 + length])))
        pos += 12 + length
    return batches


@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_from_each_producer_reaches_every_consumer(
    kafka_broker, topic_name, producer, codec
):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    records = records_of(codec)
    PRODUCERS[producer](bootstrap, topic_name, codec, records)

    # The batches are served compressed, as the producer sent them: the codec in their
    # attributes, fewer bytes than the values they hold, each one's CRC the producer's.
    batches = fetched_batches(bootstrap, topic_name)
    assert {batch.compression_type for batch in batches} == {CODECS[codec]}
    assert all(batch.validate_crc() for batch in batches)
    values_bytes = sum(len(value or b"") for _k, value, _h in records)
    assert sum(len(batch._buffer) for batch in batches) < values_bytes / 3
    # Snappy comes raw from librdkafka, xerial-framed (as from Java) from kafka-python.
    if codec == "snappy":
        framing = {bytes(batch._buffer[61:69]) == XERIAL_MAGIC for batch in batches}
        assert framing == {producer == "kafka-python"}

    expected = [
        (offset, key, value, headers) for offset, (key, value, headers) in enumerate(records)
    ]
    assert read_confluent(bootstrap, topic_name, RECORDS) == expected
    assert read_kafka_python(bootstrap, topic_name, RECORDS) == expected
    # Kaska's consumer inflates them on its side (a null value reads as b"").
    assert kaska_read(kafka_broker.address, topic_name, 1, RECORDS) == [
        (0, offset, value or b"") for offset, (_k, value, _h) in enumerate(records)
    ]
    # MESSAGE_LENGTH inflates the batch holding the offset.
    consumer = KaskaConsumer(kafka_broker.address)
    try:
        assert [consumer.msg_length(topic_name, offset) for offset in (0, 5, RECORDS - 1)] == [
            len(records[offset][1] or b"") for offset in (0, 5, RECORDS - 1)
        ]
    finally:
        consumer.close()


def produce_raw(broker, topic: str, records: bytes):
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=records)])
        ],
    )
    response = kafka_request(broker.kafka_address, request)
    return response.responses[0].partition_responses[0]


def garbled(batch: bytes) -> bytes:
    """The compressed records overwritten past their first bytes, the CRC made to match."""
    out = bytearray(batch)
    out[70:] = b"\xff" * (len(out) - 70)
    return recrc(out)


# A zstd frame of a few KB that inflates to 70 MiB: past the broker's batch_bytes_max
# (64 MiB - 16, its segment size).
BOMB_VALUE_BYTES = 70 << 20


@pytest.mark.parametrize("case", ["bomb", "garbled-lz4", "garbled-snappy"])
def test_bad_compressed_batches_are_refused_and_counted(kafka_broker, topic_name, case):
    create_topic(kafka_broker.kafka_address, topic_name, 1)
    if case == "bomb":
        records = kafka_batch([(None, bytes(BOMB_VALUE_BYTES), [])], compression=4)
        assert len(records) < 10_000
        code, outcome = MESSAGE_TOO_LARGE, "InflatedTooLargeError"
    else:
        codec = CODECS[case.removeprefix("garbled-")]
        records = garbled(kafka_batch([(None, b"v" * 1000, [])] * 10, compression=codec))
        code, outcome = CORRUPT_MESSAGE, "CorruptBatchError"
    before = kafka_answers(kafka_broker, "Produce", outcome)

    answer = produce_raw(kafka_broker, topic_name, records)

    assert (answer.error_code, answer.base_offset) == (code, -1)
    assert kafka_answers(kafka_broker, "Produce", outcome) == before + 1
    still_serves(kafka_broker)
    # Nothing was stored: the next good batch takes offset 0.
    good = produce_raw(kafka_broker, topic_name, kafka_batch([(None, b"ok", [])], compression=3))
    assert (good.error_code, good.base_offset) == (0, 0)


@pytest.mark.slow
def test_compressed_batches_replicate_and_recover(kafka_cluster, topic_name):
    """acks=all through followers' storage, then every broker's log reopened (recovery): the
    batches stay compressed everywhere, with more records than Kaska's uncompressed bound
    (4 bytes a record) would let their payload hold."""
    bootstrap = kafka_cluster.kafka_address(kafka_cluster.leader_id())
    create_topic(bootstrap, topic_name, 1)
    records = [(None, bytes(20), []) for _ in range(2000)]  # ~a byte a record, compressed
    produce_confluent(bootstrap, topic_name, "zstd", records)
    assert [v for _p, _o, v in kaska_read(kafka_cluster.bootstrap, topic_name, 1, 2000)] == [
        bytes(20)
    ] * 2000
    kafka_cluster.wait_caught_up(topic_name, [0])

    kafka_cluster.stop_all()
    stored = kafka_cluster.stored_partitions(topic_name, 0)
    assert {part.log_end_offset for part in stored.values()} == {2000}
    for part in stored.values():
        batches = list(iter_batches(part.data))
        assert {CODEC_NAMES[codec_of(header.attributes)] for header, _ in batches} == {"zstd"}
        assert any(header.record_count > header.batch_length // 4 for header, _ in batches)
        assert len(part.data) < 2000 * 20 / 4
