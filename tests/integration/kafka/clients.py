"""Real clients driven the way applications drive them: confluent-kafka (librdkafka) and Kaska's
own, for the Kafka-listener tests. Every loop ends at a deadline."""

from __future__ import annotations

import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from common.kaska import Consumer as KaskaConsumer

CLIENT_TIMEOUT_S = 60.0
WATERMARK_RETRY_PAUSE_S = 0.1
# What librdkafka's watermark query raises while leadership moves (it does not flag all of
# them retriable itself), or when it asks a broker whose metadata cache has not caught up with
# a create yet (a broker lists a topic once it knows the create committed, as Kafka's do).
LEADER_MOVING_CODES = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                       KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                       KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Through Kafka's CreateTopics (replication factor -1: the cluster's)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer is in
    futures = admin.create_topics([NewTopic(name, partitions, -1)], operation_timeout=30)
    futures[name].result(CLIENT_TIMEOUT_S)


def produce(bootstrap: str, topic: str, records, pace_s: float = 0.0,
            **conf) -> list[tuple[int, int]]:
    """records: (partition, key, value); the (partition, offset) of each, in order; raises on
    any delivery error. `pace_s`: serve the client's callbacks that long after each record (so
    that a production lasts long enough for a fault in the middle)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, **conf})
    delivered: dict[int, tuple[int, int]] = {}
    errors = []

    def report(index: int):
        def on_delivery(error, message) -> None:
            if error is not None:
                errors.append(error)
            else:
                delivered[index] = (message.partition(), message.offset())
        return on_delivery

    for index, (partition, key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition,
                                 on_delivery=report(index))
                break
            except BufferError:  # librdkafka's local queue is full: let it drain
                producer.poll(0.1)
        producer.poll(pace_s)
    left = producer.flush(CLIENT_TIMEOUT_S)
    assert left == 0 and not errors, f"{left} undelivered, errors {errors[:5]}"
    return [delivered[index] for index in range(len(records))]


def kafka_consumer(bootstrap: str, group: str = "kaska-tests", **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": 100, **conf})


def consume(consumer: Consumer, count: int, as_row=None) -> list:
    """A row per record of the next `count` ones, raising on errors: `as_row(message)`, by
    default (partition, offset, key, value)."""
    if as_row is None:
        def as_row(message):
            return message.partition(), message.offset(), message.key(), message.value()
    got = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records consumed"
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is not None:
            raise KafkaException(message.error())
        got.append(as_row(message))
    return got


def consume_from_start(bootstrap: str, topic: str, partitions: int, count: int):
    consumer = kafka_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return consume(consumer, count)
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Each partition's high watermark. A retriable error (NOT_LEADER_FOR_PARTITION: the
    leader moved, or lost its lease on a loaded machine) is asked again until
    CLIENT_TIMEOUT_S, as a Kafka user's code would; it failed a polling test once at load 13."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        consumer = kafka_consumer(bootstrap)
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                   CLIENT_TIMEOUT_S)[1]
                    for p in range(partitions)]
        except KafkaException as exc:
            error = exc.args[0]
            moving = error.retriable() or error.code() in LEADER_MOVING_CODES
            if not moving or time.monotonic() > deadline:
                raise
        finally:
            consumer.close()
        time.sleep(WATERMARK_RETRY_PAUSE_S)


def kaska_read(bootstrap: str, topic: str, partitions: int, count: int):
    """(partition, offset, value) of the first `count` records, through Kaska's protocol."""
    consumer = KaskaConsumer(bootstrap)
    try:
        for p in range(partitions):
            consumer.seek(topic, 0, p)
        got = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} records read"
            message = consumer.poll(0.5)
            if message is not None:
                got.append((message.partition, message.offset, message.value))
        return got
    finally:
        consumer.close()
