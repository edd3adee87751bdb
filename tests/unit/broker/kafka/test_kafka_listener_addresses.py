"""Each named listener advertises its own addresses: Metadata and FindCoordinator on a connection
of listener X name every broker by its address on X (kafka/config.py `brokers_on`, the context
each listener serves; kafka/metadata.py, kafka/coordinator.py)."""

import random
from types import SimpleNamespace

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from common.address import Address
from common.kaska.protocol.metadata import BrokerInfo
from services.broker.__main__ import config_from_args, parse_args
from services.broker.cluster.partition import PartitionRole
from services.broker.kafka import coordinator, metadata
from services.broker.kafka.context import KafkaContext, advertised_brokers

FLAGS = [
    "--node-id",
    "1",
    "--data-dir",
    "/d",
    "--peers",
    "2@broker-2:9092,3@broker-3:9092",
    "--kafka-listeners",
    "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:29092",
    "--kafka-advertised-listeners",
    "EXTERNAL://127.0.0.1:19091",
    "--kafka-peers",
    "2@INTERNAL://broker-2:19092,3@INTERNAL://broker-3:19092,"
    "2@EXTERNAL://127.0.0.1:19092,3@EXTERNAL://127.0.0.1:19093",
]
# Where each listener's socket is bound (port 0 read back): INTERNAL advertises it.
BOUND = {"INTERNAL": Address("10.0.0.1", 19092), "EXTERNAL": Address("0.0.0.0", 29092)}
EXPECTED = {
    "INTERNAL": {1: ("10.0.0.1", 19092), 2: ("broker-2", 19092), 3: ("broker-3", 19092)},
    "EXTERNAL": {1: ("127.0.0.1", 19091), 2: ("127.0.0.1", 19092), 3: ("127.0.0.1", 19093)},
}
LEADER = 2  # of every partition, the offsets topic's and the metadata group's included


def fake_broker() -> SimpleNamespace:
    """A broker context with no topic that knows broker 2 leads everything."""
    role = PartitionRole(
        is_leader=False, leader_id=LEADER, leader_epoch=4, leader_address="broker-2:9092"
    )
    return SimpleNamespace(
        topics=SimpleNamespace(committed_topics=dict),
        replication=SimpleNamespace(
            role=lambda topic, partition: role, controller_role=lambda: role
        ),
    )


@pytest.fixture(scope="module")
def contexts() -> dict[str, KafkaContext]:
    """One context per listener, built as the server builds them."""
    kafka = config_from_args(parse_args(FLAGS), secret=b"s").kafka
    shared = {
        "broker": fake_broker(),
        "node_id": 1,
        "cluster_id": "c",
        "rng": random.Random(1),
        "consumer_groups": None,
    }
    return {
        spec.name: KafkaContext(
            brokers=kafka.brokers_on(spec.name, 1, BOUND[spec.name]), listener=spec.name, **shared
        )
        for spec in kafka.specs()
    }


@pytest.mark.parametrize("listener", ["INTERNAL", "EXTERNAL"])
def test_metadata_names_every_broker_by_its_address_on_the_requests_listener(contexts, listener):
    kctx = contexts[listener]
    assert advertised_brokers(kctx)[0].node_id == 1  # this broker first
    request = MetadataRequest[9](
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    answer = metadata.handle(kctx, request)
    assert answer.controller_id == LEADER
    assert {b.node_id: (b.host, b.port) for b in answer.brokers} == EXPECTED[listener]


@pytest.mark.parametrize("listener", ["INTERNAL", "EXTERNAL"])
def test_find_coordinator_names_the_coordinator_on_the_requests_listener(contexts, listener):
    answer = coordinator.handle_find(
        contexts[listener], FindCoordinatorRequest[3](key="g", key_type=0)
    )
    assert (answer.error_code, answer.node_id) == (0, LEADER)
    assert (answer.host, answer.port) == EXPECTED[listener][LEADER]


def test_the_single_listener_flags_advertise_as_before():
    kafka = config_from_args(
        parse_args(["--node-id", "1", "--data-dir", "/d", "--kafka-listen", "127.0.0.1:0"])
    ).kafka
    assert kafka.brokers_on("PLAINTEXT", 1, Address("127.0.0.1", 40001)) == (
        BrokerInfo(1, "127.0.0.1", 40001),
    )
