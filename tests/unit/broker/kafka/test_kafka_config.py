"""The Kafka listener's settings: flags to config, and the combinations refused at start."""

from pathlib import Path

import pytest

from common.address import Address, Peer
from services.broker.__main__ import config_from_args, parse_args
from services.broker.config import BrokerConfig, KafkaListenerConfig
from services.broker.replication.config import PeerAddress, ReplicationConfig

PEERS = (PeerAddress(2, "h2", 9092), PeerAddress(3, "h3", 9092))
KAFKA_PEERS = (Peer(2, "h2", 19092), Peer(3, "h3", 19092))
LISTEN = Address("127.0.0.1", 0)


def config(*, peers=(), token=None, cluster_secret=None, kafka_listen=None,
           kafka_peers=()) -> BrokerConfig:
    return BrokerConfig(data_dir=Path("/nonexistent"),
                        replication=ReplicationConfig(node_id=1, peers=peers, token=token),
                        cluster_secret=cluster_secret,
                        kafka=KafkaListenerConfig(listen=kafka_listen, peers=kafka_peers))


def test_flags_reach_the_config():
    args = parse_args(["--node-id", "1", "--data-dir", "/d", "--peers", "2@h2:9092,3@h3:9092",
                       "--kafka-listen", "0.0.0.0:19092", "--kafka-advertise", "b1:29092",
                       "--kafka-peers", "2@h2:19092,3@h3:19092"])
    built = config_from_args(args, secret=b"s")
    assert built.kafka.listen == ("0.0.0.0", 19092)
    assert built.kafka.advertise == ("b1", 29092)
    assert built.kafka.peers == KAFKA_PEERS


def test_no_kafka_listener_by_default():
    assert config().kafka.listen is None


def test_cluster_with_every_kafka_address_is_accepted():
    built = config(peers=PEERS, cluster_secret=b"s", kafka_listen=LISTEN,
                   kafka_peers=KAFKA_PEERS)
    assert built.kafka.peers == KAFKA_PEERS


@pytest.mark.parametrize("fields, message", [
    ({"kafka_listen": LISTEN, "token": "t"}, "--token"),
    ({"kafka_peers": KAFKA_PEERS, "peers": PEERS, "cluster_secret": b"s"}, "--kafka-listen"),
    ({"kafka_listen": LISTEN, "kafka_peers": KAFKA_PEERS[:1], "peers": PEERS,
      "cluster_secret": b"s"}, "every broker"),
    ({"kafka_listen": LISTEN, "kafka_peers": (KAFKA_PEERS[0], KAFKA_PEERS[0]),
      "peers": PEERS, "cluster_secret": b"s"}, "every broker"),
])
def test_inconsistent_kafka_settings_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        config(**fields)
