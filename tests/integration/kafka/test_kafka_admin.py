"""The admin calls Kafka's tools make, through the clients' own admin APIs -- kafka-python's
KafkaAdminClient and confluent-kafka's AdminClient -- against real brokers: consumer groups
listed and described, configs described with their real values, the cluster described, and
topics created with the configs Kaska has per topic (which then roll and retain the topic's
log, across a restart) or refused naming the ones it has not. Marked integration."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.protocol.admin import DescribeConfigsRequest

from services.broker.replication.placement import group_directory, group_of
from tests.integration.kafka.clients import (
    CLIENT_TIMEOUT_S,
    create_topic,
    kafka_consumer,
    produce,
)
from tests.integration.kafka.kafka_broker import KafkaBroker, kafka_request, wait_for
from tests.integration.replication.cluster import FAST_ELECTIONS, BrokerCluster

pytestmark = pytest.mark.integration

INVALID_CONFIG = 40
SEGMENT_BYTES = 16 * 1024
RETENTION_BYTES = 64 * 1024
VALUE_BYTES = 1000


@contextlib.contextmanager
def kafka_python_admin(bootstrap: str):
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="kp-admin",
        request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    try:
        yield admin
    finally:
        admin.close()


def confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "client.id": "ck-admin"})


def test_both_admin_clients_list_and_describe_a_live_group_and_an_offset_only_one(
    kafka_broker, topic_name
):
    bootstrap = kafka_broker.kafka_address
    create_topic(bootstrap, topic_name, 2)
    live, offsets_only = f"{topic_name}-live", f"{topic_name}-committed"
    member = kafka_consumer(bootstrap, live, **{"client.id": "the-member"})
    committer = kafka_consumer(bootstrap, offsets_only)
    try:
        member.subscribe([topic_name])
        wait_for(lambda: member.poll(0.1) or member.assignment(), "the member's assignment")
        committer.commit(offsets=[TopicPartition(topic_name, 0, 7)], asynchronous=False)

        with kafka_python_admin(bootstrap) as admin:
            listed = {
                g["group_id"]: (g["protocol_type"], g["group_state"]) for g in admin.list_groups()
            }
            described = admin.describe_groups([live, offsets_only])
        assert listed[live] == ("consumer", "Stable")
        assert listed[offsets_only] == ("consumer", "Empty")
        group = described[live]
        assert (group["error"], group["group_state"], group["protocol_data"]) == (
            None,
            "Stable",
            "range",
        )
        [seen] = group["members"]
        assert (seen["client_id"], seen["client_host"]) == ("the-member", "/127.0.0.1")
        assert seen["member_metadata"]["topics"] == [topic_name]
        assert seen["member_assignment"]["assigned_partitions"] == [
            {"topic": topic_name, "partitions": [0, 1]}
        ]
        assert (described[offsets_only]["group_state"], described[offsets_only]["members"]) == (
            "Empty",
            [],
        )

        admin = confluent_admin(bootstrap)
        groups = admin.list_consumer_groups().result(CLIENT_TIMEOUT_S)
        states = {g.group_id: g.state for g in groups.valid}
        assert states[live] == ConsumerGroupState.STABLE
        assert states[offsets_only] == ConsumerGroupState.EMPTY
        found = admin.describe_consumer_groups([live])[live].result(CLIENT_TIMEOUT_S)
        assert found.state == ConsumerGroupState.STABLE and found.partition_assignor == "range"
        [seen] = found.members
        assert (seen.client_id, seen.host) == ("the-member", "/127.0.0.1")
        assert sorted((p.topic, p.partition) for p in seen.assignment.topic_partitions) == [
            (topic_name, 0),
            (topic_name, 1),
        ]
    finally:
        member.close()
        committer.close()


def test_both_admin_clients_describe_configs_and_the_cluster(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    with kafka_python_admin(bootstrap) as admin:
        created = admin.create_topics(
            {
                topic_name: {
                    "num_partitions": 1,
                    "configs": {"retention.ms": "86400000", "segment.bytes": str(SEGMENT_BYTES)},
                }
            }
        )
        assert [t["error_code"] for t in created["topics"]] == [0]
        configs = admin.describe_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, topic_name)], config_filter="all"
        )
        topic = configs["topic"][topic_name]
        assert (topic["retention.ms"]["value"], topic["retention.ms"]["config_source"]) == (
            "86400000",
            "DYNAMIC_TOPIC_CONFIG",
        )
        assert topic["segment.bytes"]["value"] == str(SEGMENT_BYTES)
        assert (topic["retention.bytes"]["value"], topic["cleanup.policy"]["value"]) == (
            "-1",
            "delete",
        )
        brokers = admin.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )
        assert brokers["broker"]["1"]["log.segment.bytes"]["value"] == str(64 * 1024 * 1024)
        cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 1 and cluster["cluster_id"]
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, "127.0.0.1", kafka_broker.kafka_port)
    ]

    admin = confluent_admin(bootstrap)
    resource = ConfigResource("topic", topic_name)
    entries = admin.describe_configs([resource])[resource].result(CLIENT_TIMEOUT_S)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
        "86400000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert entries["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["min.insync.replicas"].is_read_only
    described = admin.describe_cluster().result(CLIENT_TIMEOUT_S)
    assert described.controller.id == 1 and described.cluster_id == cluster["cluster_id"]
    assert [(n.id, n.host, n.port) for n in described.nodes] == [
        (1, "127.0.0.1", kafka_broker.kafka_port)
    ]


def test_both_admin_clients_are_refused_unsupported_configs_by_name(kafka_broker, topic_name):
    bootstrap = kafka_broker.kafka_address
    with kafka_python_admin(bootstrap) as admin:
        answer = admin.create_topics(
            {
                topic_name: {
                    "num_partitions": 1,
                    "configs": {"retention.ms": "1000", "cleanup.policy": "compact"},
                }
            },
            raise_errors=False,
        )
        [refused] = answer["topics"]
        assert refused["error_code"] == INVALID_CONFIG
        assert "cleanup.policy" in refused["error_message"]
        assert "retention.ms" not in refused["error_message"].split("(")[0]

    admin = confluent_admin(bootstrap)
    future = admin.create_topics([NewTopic(topic_name, 1, config={"compression.type": "zstd"})])[
        topic_name
    ]
    with pytest.raises(KafkaException) as error:
        future.result(CLIENT_TIMEOUT_S)
    assert error.value.args[0].code() == INVALID_CONFIG
    assert "compression.type" in error.value.args[0].str()
    assert topic_name not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics


def _segments(broker: KafkaBroker, topic: str) -> dict[int, int]:
    """Base offset -> size of the partition's sealed segment files (the active one is
    preallocated to the broker's --segment-bytes-max, so its file size says nothing)."""
    return _sealed_sizes(broker.data_dir / topic / "0")


def _sealed_sizes(partition_dir: Path) -> dict[int, int]:
    paths = sorted(partition_dir.glob("*.log"))
    sizes = {}
    for path in paths[:-1]:
        try:
            sizes[int(path.stem)] = path.stat().st_size
        except FileNotFoundError:
            continue  # retention deleted it between the listing and the stat: it is gone
    return sizes


def _low_watermark(bootstrap: str, topic: str) -> int:
    consumer = kafka_consumer(bootstrap, "watermarks")
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT_S)[0]
    finally:
        consumer.close()


def test_a_topics_segment_and_retention_bytes_roll_and_trim_it_across_a_restart(
    tmp_path, topic_name
):
    broker = KafkaBroker(tmp_path / "data", "--retention-check-interval-ms", "200").start()
    try:
        bootstrap = broker.kafka_address
        admin = confluent_admin(bootstrap)  # alive until the answer is in
        configs = {"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(RETENTION_BYTES)}
        admin.create_topics([NewTopic(topic_name, 1, config=configs)])[topic_name].result(
            CLIENT_TIMEOUT_S
        )
        records = [(0, None, bytes(VALUE_BYTES)) for _ in range(160)]  # 160 KB
        produce(bootstrap, topic_name, records, **{"batch.size": 4096})

        # The broker's segments are 64 MiB: only the topic's size rolls 160 KB (retention
        # may have deleted the oldest segments already).
        sealed = _segments(broker, topic_name)
        assert len(sealed) >= 2 and max(sealed.values()) <= SEGMENT_BYTES
        low = wait_for(lambda: _low_watermark(bootstrap, topic_name), "retention by bytes")
        assert low > 0
        wait_for(
            lambda: sum(_segments(broker, topic_name).values()) <= RETENTION_BYTES + SEGMENT_BYTES,
            "retention by bytes",
        )

        broker.restart()
        resource = ConfigResource("topic", topic_name)
        entries = admin.describe_configs([resource])[resource].result(CLIENT_TIMEOUT_S)
        assert (entries["segment.bytes"].value, entries["retention.bytes"].value) == (
            str(SEGMENT_BYTES),
            str(RETENTION_BYTES),
        )
        produce(bootstrap, topic_name, records[:60], **{"batch.size": 4096})
        after = {
            base: size
            for base, size in _segments(broker, topic_name).items()
            if base >= len(records)
        }  # rolled since the restart
        assert after and max(after.values()) <= SEGMENT_BYTES  # still the topic's size
        wait_for(
            lambda: sum(_segments(broker, topic_name).values()) <= RETENTION_BYTES + SEGMENT_BYTES,
            "retention by bytes after the restart",
        )
    finally:
        broker.kill()


def _topic_config_on(address: str, topic: str, name: str) -> tuple[str, int] | None:
    """(value, source) of one topic config as the broker at `address` describes it."""
    request = DescribeConfigsRequest[4](
        resources=[
            DescribeConfigsRequest[4].DescribeConfigsResource(
                resource_type=ConfigResourceType.TOPIC.value,
                resource_name=topic,
                configuration_keys=[name],
            )
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    [result] = kafka_request(address, request).results
    if result.error_code or not result.configs:
        return None
    return result.configs[0].value, result.configs[0].config_source


def _sealed_on(broker, topic: str, partition: int, groups: int) -> dict[int, int]:
    """Base offset -> size of a partition's sealed segments in a broker's data directory."""
    directory = group_directory(broker.data_dir, group_of(topic, partition, groups))
    return _sealed_sizes(directory / topic / str(partition))


@pytest.mark.slow
def test_a_cluster_lists_a_group_once_and_every_replica_rolls_by_the_topics_settings(
    tmp_path, topic_name
):
    """Three brokers, one replication group each (the default): the settings reach every
    broker (its copy of `__offsets`), which describes them and rolls its replicas by them --
    the partitions of groups led by brokers other than the controller included; only the
    coordinator lists the group, so the AdminClient's list over every broker names it once."""
    groups = 3
    cluster = BrokerCluster(
        tmp_path / "cluster", size=3, kafka=True, groups=groups, extra_args=FAST_ELECTIONS
    ).start()
    try:
        bootstrap = ",".join(cluster.kafka_address(i) for i in cluster.ids)
        admin = confluent_admin(bootstrap)
        admin.create_topics(
            [NewTopic(topic_name, groups, config={"segment.bytes": str(SEGMENT_BYTES)})]
        )[topic_name].result(CLIENT_TIMEOUT_S)
        produce(
            bootstrap,
            topic_name,
            [(p, None, bytes(VALUE_BYTES)) for p in range(groups) for _ in range(40)],
            **{"batch.size": 4096},
        )
        for i in cluster.ids:
            address = cluster.kafka_address(i)
            assert wait_for(
                lambda a=address: _topic_config_on(a, topic_name, "segment.bytes"),
                f"broker {i} describes the topic",
            ) == (str(SEGMENT_BYTES), 1)
            for p in range(groups):
                sealed = wait_for(
                    lambda b=cluster.brokers[i], p=p: (
                        len(found := _sealed_on(b, topic_name, p, groups)) >= 2 and found
                    ),
                    f"broker {i} rolled its replica of partition {p}",
                )
                assert max(sealed.values()) <= SEGMENT_BYTES

        group = f"{topic_name}-group"
        member = kafka_consumer(bootstrap, group)
        try:
            member.subscribe([topic_name])
            wait_for(lambda: member.poll(0.1) or member.assignment(), "the member's assignment")
            with kafka_python_admin(bootstrap) as kp_admin:
                listed = [g["group_id"] for g in kp_admin.list_groups()]
                described = kp_admin.describe_groups([group])[group]
            assert listed.count(group) == 1
            assert described["group_state"] == "Stable" and len(described["members"]) == 1
        finally:
            member.close()
    finally:
        cluster.close()
