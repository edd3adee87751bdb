"""Offsets through Kafka's APIs on one broker: DeleteRecords with both admin clients, then
consumers and ListOffsets at the new log start; ListOffsets by timestamp (`offsets_for_times`)
with both clients; OffsetForLeaderEpoch answered from the partition's leader epochs, and the
client's current leader epoch fenced."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest

from tests.integration.kafka.clients import (
    CLIENT_TIMEOUT_S,
    consume_from_start,
    create_topic,
    kafka_consumer,
    produce,
)
from tests.integration.kafka.kafka_broker import kafka_request

pytestmark = pytest.mark.integration

NONE = 0
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
LATEST = -1
T0_MS = 1_700_000_000_000
STEP_MS = 10


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    """(ListOffsets earliest, latest) of partition 0, through librdkafka."""
    consumer = kafka_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), CLIENT_TIMEOUT_S)
    finally:
        consumer.close()


def test_delete_records_through_both_admin_clients(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, f"d{i}".encode()) for i in range(100)])
    assert watermarks(bootstrap, topic_name) == (0, 100)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic_name, 0, 40)])
    deleted = next(iter(futures.values())).result(CLIENT_TIMEOUT_S)
    assert deleted.low_watermark == 40
    assert watermarks(bootstrap, topic_name) == (40, 100)
    first = consume_from_start(bootstrap, topic_name, 1, 1)
    assert [(offset, value) for _p, offset, _k, value in first] == [(40, b"d40")]

    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = kp_admin.delete_records({KpTopicPartition(topic_name, 0): 60})
    finally:
        kp_admin.close()
    assert [meta["low_watermark"] for meta in answer.values()] == [60]
    assert watermarks(bootstrap, topic_name) == (60, 100)
    rest = consume_from_start(bootstrap, topic_name, 1, 40)
    assert [offset for _p, offset, _k, _v in rest] == list(range(60, 100))


def test_delete_records_refuses_offsets_above_the_high_watermark(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, b"x")] * 5)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic_name, 0, 6)])
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        next(iter(futures.values())).result(CLIENT_TIMEOUT_S)
    assert watermarks(bootstrap, topic_name) == (0, 5)


def partition_epoch(address: str, topic: str) -> int:
    metadata = kafka_request(
        address,
        MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    return metadata.topics[0].partitions[0].leader_epoch


def end_offset(address: str, topic: str, leader_epoch: int, current_epoch: int):
    """(error code, leader epoch, end offset) of OffsetForLeaderEpoch v4 for partition 0."""
    Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = OffsetForLeaderEpochRequest[4](
        replica_id=-1,
        topics=[
            Topic(
                topic=topic,
                partitions=[
                    Topic.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=current_epoch, leader_epoch=leader_epoch
                    )
                ],
            )
        ],
    )
    answer = kafka_request(address, request).topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


def test_offset_for_leader_epoch_and_current_epoch_fencing(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, b"e")] * 30)
    epoch = partition_epoch(bootstrap, topic_name)
    assert epoch >= 1  # the scenario: a real election's epoch, stamped on the batches

    assert end_offset(bootstrap, topic_name, epoch, epoch) == (NONE, epoch, 30)
    assert end_offset(bootstrap, topic_name, epoch - 1, epoch) == (NONE, epoch - 1, 0)
    assert end_offset(bootstrap, topic_name, epoch + 1, -1) == (NONE, -1, -1)
    assert end_offset(bootstrap, topic_name, epoch, epoch - 1)[0] == FENCED_LEADER_EPOCH
    assert end_offset(bootstrap, topic_name, epoch, epoch + 1)[0] == UNKNOWN_LEADER_EPOCH

    Topic = ListOffsetsRequest.ListOffsetsTopic
    for current, code in ((epoch, NONE), (epoch - 1, FENCED_LEADER_EPOCH)):
        listed = kafka_request(
            bootstrap,
            ListOffsetsRequest[7](
                replica_id=-1,
                isolation_level=0,
                topics=[
                    Topic(
                        name=topic_name,
                        partitions=[
                            Topic.ListOffsetsPartition(
                                partition_index=0, current_leader_epoch=current, timestamp=LATEST
                            )
                        ],
                    )
                ],
            ),
        )
        assert listed.topics[0].partitions[0].error_code == code


def produce_timed(bootstrap: str, topic: str, count: int, compression: str = "none") -> None:
    """`count` records stamped T0 + STEP * i through librdkafka, several to a batch (so lookups
    land inside Kafka batches too), compressed by `compression`."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 7,
            "enable.idempotence": True,
            "compression.type": compression,
        }
    )
    for i in range(count):
        producer.produce(topic, value=b"t%d" % i, partition=0, timestamp=T0_MS + STEP_MS * i)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


# (target timestamp, expected (offset, timestamp)): exact hits, between two records (the later
# one), before everything (the first), after everything (none: -1).
TIME_LOOKUPS = [
    (T0_MS, (0, T0_MS)),
    (T0_MS + 33 * STEP_MS, (33, T0_MS + 33 * STEP_MS)),
    (T0_MS + 33 * STEP_MS + 1, (34, T0_MS + 34 * STEP_MS)),
    (T0_MS - 5_000, (0, T0_MS)),
    (T0_MS + 60 * STEP_MS, (-1, -1)),
]


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_offsets_for_times_with_both_clients(kafka_broker, topic_name, compression):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce_timed(bootstrap, topic_name, 50, compression)
    assert watermarks(bootstrap, topic_name) == (0, 50)  # the scenario: all 50 committed

    consumer = kafka_consumer(bootstrap)
    try:  # one lookup per request: a partition appears once in a ListOffsets request
        found = [
            consumer.offsets_for_times([TopicPartition(topic_name, 0, target)], CLIENT_TIMEOUT_S)[0]
            for target, _ in TIME_LOOKUPS
        ]
    finally:
        consumer.close()
    assert [(tp.offset, tp.error) for tp in found] == [
        (offset, None) for _, (offset, _ts) in TIME_LOOKUPS
    ]

    kp_consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        for target, (offset, timestamp) in TIME_LOOKUPS:
            answer = kp_consumer.offsets_for_times({KpTopicPartition(topic_name, 0): target})
            got = answer[KpTopicPartition(topic_name, 0)]
            if offset < 0:
                assert got is None, target
            else:
                assert (got.offset, got.timestamp) == (offset, timestamp), target
    finally:
        kp_consumer.close()


def test_offsets_for_times_of_kafka_python_records_after_delete_records(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    try:
        for i in range(20):
            producer.send(
                topic_name, value=b"p%d" % i, partition=0, timestamp_ms=T0_MS + STEP_MS * i
            )
        producer.flush(CLIENT_TIMEOUT_S)
    finally:
        producer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    next(iter(admin.delete_records([TopicPartition(topic_name, 0, 5)]).values())).result(
        CLIENT_TIMEOUT_S
    )
    assert watermarks(bootstrap, topic_name) == (5, 20)
    kp_consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = KpTopicPartition(topic_name, 0)
        early = kp_consumer.offsets_for_times({tp: T0_MS})[tp]
        middle = kp_consumer.offsets_for_times({tp: T0_MS + 12 * STEP_MS - 3})[tp]
    finally:
        kp_consumer.close()
    assert (early.offset, early.timestamp) == (5, T0_MS + 5 * STEP_MS)  # from the log start
    assert (middle.offset, middle.timestamp) == (12, T0_MS + 12 * STEP_MS)
