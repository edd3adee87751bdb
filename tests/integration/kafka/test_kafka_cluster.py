"""Kafka clients against a three-broker cluster: followers answer NOT_LEADER_OR_FOLLOWER, clients
find the leader through Metadata, and an idempotent producer rides out the leader's SIGKILL with
every record stored exactly once."""

from __future__ import annotations

import signal
import threading

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from kafka.protocol.consumer import OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from services.broker.replication.placement import preferred_leader
from tests.integration.kafka.clients import (
    consume,
    consume_from_start,
    create_topic,
    high_watermarks,
    kafka_consumer,
    produce,
)
from tests.integration.kafka.kafka_broker import kafka_request, wait_for
from tests.integration.metrics_scrape import scrape
from tests.integration.replication.cluster import FAST_ELECTIONS, BrokerCluster
from tests.unit.broker.kafka.kafka_batches import kafka_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOT_LEADER_OR_FOLLOWER = 6


def produce_in_background(bootstrap: str, topic: str, records, pace_s: float
                          ) -> tuple[threading.Thread, dict, threading.Event]:
    """An idempotent confluent-kafka producer on a thread of its own: (the started thread,
    its result -- "delivered" or "error" --, set when it ended)."""
    result: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            result["delivered"] = produce(bootstrap, topic, records, pace_s=pace_s,
                                          **{"linger.ms": 20, "batch.num.messages": 100})
        except (AssertionError, KafkaException) as exc:  # handed to the test thread
            result["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result, done


def test_follower_refuses_and_clients_find_the_leader(kafka_cluster, topic_name):
    leader = kafka_cluster.leader_id()
    follower = kafka_cluster.others(leader)[0]
    follower_address = kafka_cluster.kafka_address(follower)
    create_topic(follower_address, topic_name, 2)  # CreateTopics goes to the controller

    def follower_metadata():
        """The follower's Metadata once it applied the topic: CreateTopics is answered when a
        majority has it, which need not include this follower yet (Kafka's metadata is
        eventually consistent across brokers too)."""
        metadata = kafka_request(follower_address, MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        return metadata if metadata.topics[0].partitions else None

    metadata = wait_for(follower_metadata, "the follower knows the new topic")
    assert {(b.node_id, f"{b.host}:{b.port}") for b in metadata.brokers} == \
        {(i, kafka_cluster.kafka_address(i)) for i in kafka_cluster.ids}
    assert metadata.controller_id == leader
    assert [p.leader_id for p in metadata.topics[0].partitions] == [leader, leader]

    Topic = ProduceRequest.TopicProduceData
    refused = kafka_request(follower_address, ProduceRequest[9](
        transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[Topic(
            name=topic_name, partition_data=[Topic.PartitionProduceData(
                index=0, records=kafka_batch([(None, b"v", [])]))])]))
    assert refused.responses[0].partition_responses[0].error_code == NOT_LEADER_OR_FOLLOWER
    EpochTopic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    epoch = metadata.topics[0].partitions[0].leader_epoch
    unanswered = kafka_request(follower_address, OffsetForLeaderEpochRequest[4](
        replica_id=-1, topics=[EpochTopic(topic=topic_name, partitions=[
            EpochTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch,
                                                leader_epoch=epoch)])]))
    assert unanswered.topics[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER

    # A client that knows only the follower produces and consumes through the leader.
    records = [(i % 2, None, f"r{i}".encode()) for i in range(1000)]
    delivered = produce(follower_address, topic_name, records)
    assert sorted(delivered) == sorted((p, o) for p in range(2) for o in range(500))
    consumed = consume_from_start(follower_address, topic_name, 2, 1000)
    assert sorted((p, o, v) for p, o, _k, v in consumed) == sorted(
        (p, o, v) for (p, _k, v), (_p, o) in zip(records, delivered, strict=True))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_idempotent_producer_survives_the_leader_being_killed(kafka_cluster, topic_name, sig):
    """Killed, or stopped (SIGTERM: it hands leadership over first)."""
    bootstrap = ",".join(kafka_cluster.kafka_address(i) for i in kafka_cluster.ids)
    create_topic(bootstrap, topic_name, 1)
    leader = kafka_cluster.leader_id()
    count = 4000
    records = [(0, None, f"r{i}".encode()) for i in range(count)]
    # About 8 s of production (2 ms per record), so the kill lands in the middle.
    producer, result, done = produce_in_background(bootstrap, topic_name, records, 0.002)
    wait_for(lambda: high_watermarks(bootstrap, topic_name, 1)[0] >= count // 4,
             "a quarter of the records acknowledged")
    assert high_watermarks(bootstrap, topic_name, 1)[0] < count and not done.is_set(), \
        "production ended before the kill: the test would prove nothing"
    assert kafka_cluster.kill(leader, sig) == (0 if sig == signal.SIGTERM else -sig)
    if sig == signal.SIGTERM:  # the scenario: it handed over, it did not just go away
        assert kafka_cluster.log_lines(leader, "handed leadership of epoch"), \
            kafka_cluster.log_lines(leader, "leadership")
    producer.join(120)
    assert not producer.is_alive(), "producer still running after 120 s"
    assert "error" not in result, result.get("error")
    new_leader = kafka_cluster.leader_id()
    assert new_leader != leader
    # Exactly once: every record at one offset, nothing stored twice.
    assert sorted(offset for _p, offset in result["delivered"]) == list(range(count))
    assert high_watermarks(bootstrap, topic_name, 1) == [count]
    consumed = consume_from_start(bootstrap, topic_name, 1, count)
    assert [v for _p, _o, _k, v in consumed] == [v for _p, _k, v in records]


def kafka_requests_answered(cluster: BrokerCluster, i: int, api: str) -> int:
    """How many `api` requests broker i's Kafka listener answered ok (its metrics)."""
    _text, samples = scrape(cluster.brokers[i].metrics_port)
    return int(samples.get(("kaska_kafka_requests_total",
                            (("api", api), ("outcome", "ok"))), 0))


def test_consumer_follows_the_new_leader_without_gaps_or_repeats(kafka_cluster, topic_name):
    """The group leader's broker is SIGKILLed while librdkafka reads: the consumer learns the
    new leader epoch from Metadata, validates its position with OffsetForLeaderEpoch (KIP-320)
    on the new leader, and reads on with no record skipped or repeated."""
    bootstrap = ",".join(kafka_cluster.kafka_address(i) for i in kafka_cluster.ids)
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(0, None, f"c{i}".encode()) for i in range(2000)])
    kafka_cluster.wait_caught_up(topic_name, [0])  # every broker holds them all
    leader = kafka_cluster.leader_id()
    consumer = kafka_consumer(bootstrap, **{"max.partition.fetch.bytes": 4096,
                                            "queued.min.messages": 10})
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        head = consume(consumer, 500)
        kafka_cluster.kill(leader, signal.SIGKILL)
        # Only the new leader can serve these: the consumer must have found it.
        produce(bootstrap, topic_name, [(0, None, f"c{i}".encode()) for i in range(2000, 3000)])
        rest = consume(consumer, 2500)
    finally:
        consumer.close()
    assert kafka_cluster.leader_id() != leader
    validations = {i: kafka_requests_answered(kafka_cluster, i, "OffsetForLeaderEpoch")
                   for i in kafka_cluster.others(leader)}
    assert sum(validations.values()) >= 1, \
        f"the consumer never validated its position after the kill: {validations}"
    assert [(offset, value) for _p, offset, _k, value in head + rest] == \
        [(i, f"c{i}".encode()) for i in range(3000)]


@pytest.fixture
def kafka_groups_cluster(tmp_path):
    """Three brokers, three replication groups: each partition has its group's leader."""
    cluster = BrokerCluster(tmp_path / "groups", size=3, kafka=True, groups=3,
                            extra_args=FAST_ELECTIONS).start()
    yield cluster
    cluster.close()


def test_partitions_led_by_three_brokers_and_a_killed_one_moves_only_its_own(
        kafka_groups_cluster, topic_name):
    """librdkafka reads each partition's leader from Metadata and produces to three brokers at
    once; when one of them is SIGKILLed, only its partitions move (NOT_LEADER_OR_FOLLOWER, then
    the new leader), and the idempotent producer still stores every record exactly once."""
    cluster = kafka_groups_cluster
    bootstrap = ",".join(cluster.kafka_address(i) for i in cluster.ids)
    partitions = 6
    wait_for(lambda: all(cluster.group_leader(g).leader_id == preferred_leader(g, cluster.ids)
                         for g in range(3)) or None, "every group led by its preferred broker")
    create_topic(bootstrap, topic_name, partitions)
    leaders = {p.partition_index: p.leader_id for p in kafka_request(
        cluster.kafka_address(1), MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].partitions}
    assert set(leaders.values()) == set(cluster.ids), f"partition leaders {leaders}"
    victim = leaders[0]
    count = 6000
    records = [(i % partitions, None, f"r{i}".encode()) for i in range(count)]
    producer, result, done = produce_in_background(bootstrap, topic_name, records, 0.0015)
    wait_for(lambda: sum(high_watermarks(bootstrap, topic_name, partitions)) >= count // 4,
             "a quarter of the records acknowledged")
    assert not done.is_set(), "production ended before the kill: the test would prove nothing"
    assert cluster.kill(victim, signal.SIGKILL) == -signal.SIGKILL
    producer.join(120)
    assert not producer.is_alive(), "producer still running after 120 s"
    assert "error" not in result, result.get("error")
    delivered = result["delivered"]
    for p in range(partitions):
        offsets = sorted(offset for partition, offset in delivered if partition == p)
        assert offsets == list(range(count // partitions)), f"partition {p}"
    assert high_watermarks(bootstrap, topic_name, partitions) == [count // partitions] * 6
    consumed = consume_from_start(bootstrap, topic_name, partitions, count)
    assert sorted(v for _p, _o, _k, v in consumed) == sorted(v for _p, _k, v in records)
    moved = {p.partition_index: p.leader_id for p in kafka_request(
        cluster.kafka_address(cluster.others(victim)[0]), MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].partitions}
    assert all(moved[p] == leaders[p] for p in leaders if leaders[p] != victim), moved
    assert all(moved[p] != victim for p in leaders), moved
