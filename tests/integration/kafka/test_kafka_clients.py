"""Real Kafka clients against one broker's Kafka listener, over the same log as Kaska's own
protocol: confluent-kafka (librdkafka), kafka-python and kcat. Marked integration: a real
broker process on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from common.kaska import Admin as KaskaAdmin
from common.kaska import Consumer as KaskaConsumer
from common.kaska import Producer as KaskaProducer
from tests.conftest import running_in_ci
from tests.integration.kafka.clients import (
    CLIENT_TIMEOUT_S,
    consume,
    consume_from_start,
    create_topic,
    high_watermarks,
    kafka_consumer,
    kaska_read,
    produce,
)
from tests.integration.kafka.kafka_broker import wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS = 3000


def test_idempotent_produce_then_exactly_the_same_records_through_both_protocols(
        kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, PARTITIONS)
    records = [(i % PARTITIONS, f"k{i}".encode(), f"value-{i}".encode()) for i in range(RECORDS)]

    delivered = produce(bootstrap, topic_name, records)

    per_partition = [sorted(o for p, o in delivered if p == part) for part in range(PARTITIONS)]
    assert per_partition == [list(range(RECORDS // PARTITIONS))] * PARTITIONS
    assert high_watermarks(bootstrap, topic_name, PARTITIONS) == [RECORDS // PARTITIONS] * 3
    consumed = consume_from_start(bootstrap, topic_name, PARTITIONS, RECORDS)
    expected = {(p, o, k, v) for (p, k, v), (_, o) in zip(records, delivered, strict=True)}
    assert len(consumed) == RECORDS and set(consumed) == expected
    # Kaska's own consumer sees the same offsets and values.
    through_kaska = kaska_read(kafka_broker.address, topic_name, PARTITIONS, RECORDS)
    assert set(through_kaska) == {(p, o, v) for p, o, _k, v in expected}


def test_kaska_producer_records_reach_kafka_consumers(kafka_broker, topic_name):
    create_topic(kafka_broker.kafka_address, topic_name, 1)
    values = [f"kaska-{i}".encode() for i in range(500)]
    producer = KaskaProducer(kafka_broker.address)
    try:
        futures = [producer.send(topic_name, value) for value in values]
        producer.flush()
        offsets = [future.result(CLIENT_TIMEOUT_S) for future in futures]
    finally:
        producer.close()
    assert offsets == list(range(len(values)))
    consumed = consume_from_start(kafka_broker.kafka_address, topic_name, 1, len(values))
    assert consumed == [(0, i, None, value) for i, value in enumerate(values)]


def test_commit_through_kafka_and_resume_through_both_protocols(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, f"r{i}".encode()) for i in range(100)])
    group = f"group-{topic_name}"

    first = kafka_consumer(bootstrap, group)
    try:
        first.assign([TopicPartition(topic_name, 0)])  # no offset: the committed one, or start
        head = consume(first, 40)
        first.commit(offsets=[TopicPartition(topic_name, 0, 40)], asynchronous=False)
    finally:
        first.close()
    assert [offset for _p, offset, _k, _v in head] == list(range(40))

    second = kafka_consumer(bootstrap, group)
    try:
        second.assign([TopicPartition(topic_name, 0)])
        rest = consume(second, 60)
        committed = second.committed([TopicPartition(topic_name, 0)], CLIENT_TIMEOUT_S)
    finally:
        second.close()
    assert [offset for _p, offset, _k, _v in rest] == list(range(40, 100))
    assert committed[0].offset == 40

    kaska = KaskaConsumer(kafka_broker.address, group=group)
    try:
        assert kaska.committed(topic_name) == 40
        kaska.commit(topic_name, 70)  # and back: a Kaska commit, read through Kafka
    finally:
        kaska.close()
    third = kafka_consumer(bootstrap, group)
    try:
        third.assign([TopicPartition(topic_name, 0)])
        assert consume(third, 1)[0][1] == 70
    finally:
        third.close()


def test_acks_zero_and_one_are_stored_too(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, b"acks1")], **{"enable.idempotence": False,
                                                              "acks": "1"})
    produce(bootstrap, topic_name, [(0, None, b"acks0")], **{"enable.idempotence": False,
                                                              "acks": "0"})
    # acks=0 gets no answer: wait for the record itself.
    wait_for(lambda: high_watermarks(bootstrap, topic_name, 1) == [2], "the acks=0 record")
    assert [v for _p, _o, _k, v in consume_from_start(bootstrap, topic_name, 1, 2)] == \
        [b"acks1", b"acks0"]


def test_kafka_python_produces_and_consumes(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        futures = [producer.send(topic_name, key=b"k", value=f"kp{i}".encode(),
                                 partition=i % 2) for i in range(1000)]
        producer.flush(CLIENT_TIMEOUT_S)
        metadata = [future.get(CLIENT_TIMEOUT_S) for future in futures]
    finally:
        producer.close()
    assert sorted((m.partition, m.offset) for m in metadata) == \
        sorted((p, o) for p in range(2) for o in range(500))

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    try:
        consumer.assign([KpTopicPartition(topic_name, p) for p in range(2)])
        consumer.seek_to_beginning()
        got = []
        wait_for(lambda: got.extend(record for records in consumer.poll(200).values()
                                    for record in records) or len(got) >= 1000,
                 "1000 records through kafka-python")
    finally:
        consumer.close()
    assert sorted((r.partition, r.offset, r.key, r.value) for r in got) == sorted(
        (m.partition, m.offset, b"k", f"kp{i}".encode()) for i, m in enumerate(metadata))


# Skipped without kcat only outside CI: .ci/run installs it, so there a missing kcat fails.
@pytest.mark.skipif(shutil.which("kcat") is None and not running_in_ci(),
                    reason="kcat not installed (.ci/run installs it: apt-get install kcat)")
def test_kcat_produces_and_consumes(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    lines = [f"line-{i}" for i in range(200)]
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic_name, "-p", "0",
                    "-X", "enable.idempotence=true"], input="\n".join(lines) + "\n",
                   text=True, check=True, timeout=CLIENT_TIMEOUT_S)
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic_name, "-o", "beginning",
                          "-e", "-f", "%o %s\n"], capture_output=True, text=True, check=True,
                         timeout=CLIENT_TIMEOUT_S).stdout
    assert out.splitlines() == [f"{i} {line}" for i, line in enumerate(lines)]


def test_topics_are_created_and_deleted_through_kafka_admin(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, topic_name, 2)
    with pytest.raises(KafkaException) as exists:
        create_topic(bootstrap, topic_name, 2)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert admin.list_topics(topic_name, timeout=CLIENT_TIMEOUT_S) \
        .topics[topic_name].partitions.keys() == {0, 1}

    admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(CLIENT_TIMEOUT_S)
    assert topic_name not in KaskaAdmin(kafka_broker.address).topics()
    with pytest.raises(KafkaException) as unknown:
        admin.delete_topics([topic_name])[topic_name].result(CLIENT_TIMEOUT_S)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_consumer_group_subscribe_commit_and_resume(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [(i % 2, None, f"g{i}".encode()) for i in range(200)])
    group = f"group-{topic_name}"
    conf = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

    first = kafka_consumer(bootstrap, group, **conf)
    try:
        first.subscribe([topic_name])
        head = consume(first, 120)
        first.commit(asynchronous=False)  # the positions: past every record consumed
        committed = first.committed([TopicPartition(topic_name, p) for p in range(2)],
                                    CLIENT_TIMEOUT_S)
    finally:
        first.close()  # LeaveGroup
    positions = {p: max(o for q, o, _k, _v in head if q == p) + 1 for p in range(2)}
    assert {tp.partition: tp.offset for tp in committed} == positions

    second = kafka_consumer(bootstrap, group, **conf)
    try:
        second.subscribe([topic_name])
        rest = consume(second, 80)
    finally:
        second.close()
    assert sorted((p, o) for p, o, _k, _v in head + rest) == \
        sorted((p, o) for p in range(2) for o in range(100))


def test_two_members_of_a_group_split_the_partitions(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, [(i % 4, None, f"s{i}".encode()) for i in range(400)])
    group = f"group-{topic_name}"
    conf = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    consumers = [kafka_consumer(bootstrap, group, **conf) for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic_name])

        def split() -> bool:
            for consumer in consumers:
                consumer.poll(0.1)  # drives the rebalance; records are read after it
            owned = [{tp.partition for tp in consumer.assignment()} for consumer in consumers]
            return all(owned) and set.union(*owned) == {0, 1, 2, 3} and \
                not owned[0] & owned[1]

        wait_for(split, "both members hold disjoint partitions")
        for consumer in consumers:
            # Read what this member holds from the start: the polls above may have read some.
            consumer.assign([TopicPartition(topic_name, tp.partition, OFFSET_BEGINNING)
                             for tp in consumer.assignment()])
        owned = [len(consumer.assignment()) for consumer in consumers]
        got = [consume(consumer, 100 * count) for consumer, count in zip(consumers, owned,
                                                                         strict=True)]
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted((p, o) for records in got for p, o, _k, _v in records) == \
        sorted((p, o) for p in range(4) for o in range(100))


def test_kafka_python_group_consumer_commits_and_resumes(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, f"p{i}".encode()) for i in range(50)])
    group = f"group-{topic_name}"

    def read(count: int) -> list[int]:
        consumer = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=6000, heartbeat_interval_ms=500)
        try:
            got: list = []
            wait_for(lambda: got.extend(record for records in consumer.poll(200).values()
                                        for record in records) or len(got) >= count,
                     f"{count} records through a kafka-python group")
            consumer.commit({KpTopicPartition(topic_name, 0):
                             OffsetAndMetadata(got[count - 1].offset + 1, "", -1)})
            return [record.offset for record in got[:count]]
        finally:
            consumer.close()

    assert read(20) == list(range(20))
    assert read(30) == list(range(20, 50))


def test_gzip_compressed_batches_are_stored_and_served(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 1)
    records = [(0, f"k{i}".encode(), f"gzip-{i}".encode() * 10) for i in range(500)]
    produce(bootstrap, topic_name, records, **{"compression.type": "gzip"})
    consumed = consume_from_start(bootstrap, topic_name, 1, len(records))
    assert [(o, k, v) for _p, o, k, v in consumed] == \
        [(i, k, v) for i, (_p, k, v) in enumerate(records)]
    assert [v for _p, _o, v in kaska_read(kafka_broker.address, topic_name, 1, 500)] == \
        [v for _p, _k, v in records]
