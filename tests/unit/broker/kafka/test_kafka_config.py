"""The Kafka listeners' settings: flags to config, Kafka's named listeners and the single-listener
flags, and the combinations refused at start, each with a message naming what is wrong."""

from pathlib import Path

import pytest

from common.address import Address, NamedAddress, NamedPeer
from services.broker.__main__ import config_from_args, parse_args
from services.broker.config import BrokerConfig
from services.broker.kafka.config import KafkaListenerConfig, KafkaListenerConfigError, ListenerSpec
from services.broker.replication.config import PeerAddress, ReplicationConfig

PEERS = (PeerAddress(2, "h2", 9092), PeerAddress(3, "h3", 9092))
KAFKA_PEERS = (NamedPeer(2, "PLAINTEXT", "h2", 19092), NamedPeer(3, "PLAINTEXT", "h3", 19092))
LISTEN = Address("127.0.0.1", 0)
CLUSTER = ["--node-id", "1", "--data-dir", "/d", "--peers", "2@h2:9092,3@h3:9092"]
NAMED = [
    "--kafka-listeners",
    "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:29092",
    "--kafka-advertised-listeners",
    "INTERNAL://broker-1:19092,EXTERNAL://127.0.0.1:19091",
    "--kafka-listener-security-protocol-map",
    "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
]
NAMED_PEERS = (
    "2@INTERNAL://broker-2:19092,2@EXTERNAL://127.0.0.1:19092,"
    "3@INTERNAL://broker-3:19092,3@EXTERNAL://127.0.0.1:19093"
)


def config(*, peers=(), token=None, cluster_secret=None, kafka=None) -> BrokerConfig:
    """`peers`: the replication peers; `kafka`: KafkaListenerConfig's fields."""
    return BrokerConfig(
        data_dir=Path("/nonexistent"),
        replication=ReplicationConfig(node_id=1, peers=peers, token=token),
        cluster_secret=cluster_secret,
        kafka=KafkaListenerConfig(**(kafka or {})),
    )


def from_flags(*flags: str) -> BrokerConfig:
    return config_from_args(parse_args([*CLUSTER, *flags]), secret=b"s")


def test_the_single_listener_flags_make_one_listener_named_plaintext():
    built = from_flags(
        "--kafka-listen",
        "0.0.0.0:19092",
        "--kafka-advertise",
        "b1:29092",
        "--kafka-peers",
        "2@h2:19092,3@h3:19092",
    )
    assert built.kafka.peers == KAFKA_PEERS
    assert built.kafka.specs() == (
        ListenerSpec("PLAINTEXT", Address("0.0.0.0", 19092), Address("b1", 29092)),
    )
    assert built.kafka.peers_on("PLAINTEXT") == KAFKA_PEERS


def test_named_listeners_reach_the_config_each_with_its_advertised_address_and_peers():
    built = from_flags(*NAMED, "--kafka-peers", NAMED_PEERS)
    assert built.kafka.specs() == (
        ListenerSpec("INTERNAL", Address("0.0.0.0", 19092), Address("broker-1", 19092)),
        ListenerSpec("EXTERNAL", Address("0.0.0.0", 29092), Address("127.0.0.1", 19091)),
    )
    assert built.kafka.peers_on("INTERNAL") == (
        NamedPeer(2, "INTERNAL", "broker-2", 19092),
        NamedPeer(3, "INTERNAL", "broker-3", 19092),
    )
    assert [peer.port for peer in built.kafka.peers_on("EXTERNAL")] == [19092, 19093]


def test_names_are_case_insensitive_and_an_unadvertised_listener_advertises_its_bound_address():
    built = config(
        kafka={
            "listeners": (
                NamedAddress("INTERNAL", "127.0.0.1", 0),
                NamedAddress("EXTERNAL", "127.0.0.1", 0),
            ),
            "advertised_listeners": (NamedAddress("EXTERNAL", "h", 1),),
        }
    )
    assert [spec.advertise for spec in built.kafka.specs()] == [None, Address("h", 1)]
    parsed = parse_args([*CLUSTER[:4], "--kafka-listeners", "internal://127.0.0.1:0"])
    assert parsed.kafka_listeners == (NamedAddress("INTERNAL", "127.0.0.1", 0),)


def test_no_kafka_listener_by_default():
    built = config()
    assert not built.kafka.enabled and built.kafka.specs() == ()


def test_cluster_with_every_kafka_address_is_accepted():
    built = config(peers=PEERS, cluster_secret=b"s", kafka={"listen": LISTEN, "peers": KAFKA_PEERS})
    assert built.kafka.enabled and built.kafka.peers_on("PLAINTEXT") == KAFKA_PEERS


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--kafka-listeners", "A://h:1,a://h:2"], "names A more than once"),
        (["--kafka-listeners", "A://h:1,B://h:1"], "binds port 1 more than once"),
        (
            ["--kafka-listeners", "A://h:1", "--kafka-advertised-listeners", "B://h:1"],
            "names B, which --kafka-listeners does not define",
        ),
        (
            ["--kafka-listeners", "A://h:1", "--kafka-advertised-listeners", "A://h:1,A://g:1"],
            "names A more than once",
        ),
        (["--kafka-listen", "h:1", "--kafka-listeners", "A://h:2"], "not both"),
        (
            ["--kafka-listeners", "A://h:1", "--kafka-advertise", "h:1"],
            "--kafka-advertise advertises --kafka-listen",
        ),
        (
            [
                "--kafka-listen",
                "h:1",
                "--kafka-advertise",
                "h:1",
                "--kafka-advertised-listeners",
                "PLAINTEXT://h:1",
            ],
            "not both",
        ),
        (
            [
                "--kafka-listeners",
                "A://h:1,B://h:2",
                "--kafka-listener-security-protocol-map",
                "A:PLAINTEXT,B:SSL",
            ],
            "listener B would speak SSL",
        ),
        (["--kafka-listeners", "SASL_SSL://h:1"], "listener SASL_SSL would speak SASL_SSL"),
        (
            [
                "--kafka-listeners",
                "A://h:1",
                "--kafka-listener-security-protocol-map",
                "A:PLAINTEXT,a:PLAINTEXT",
            ],
            "map names A more than once",
        ),
        (["--kafka-peers", "2@h:1"], "--kafka-peers needs a Kafka listener"),
        (
            ["--kafka-listeners", "A://h:1", "--kafka-peers", "2@B://g:1"],
            "names listener B, which this broker does not have",
        ),
    ],
)
def test_contradicting_listener_flags_are_named_errors(flags, message):
    args = parse_args([*CLUSTER[:4], *flags])
    with pytest.raises(KafkaListenerConfigError, match=message):
        config_from_args(args)


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--kafka-listeners", "0.0.0.0:19092", "no listener NAME://"),
        ("--kafka-listeners", "1A://h:1", "a name is a letter"),
        ("--kafka-listeners", "A://h", "no ':' before the port"),
        ("--kafka-advertised-listeners", "A://h:0", "1..65535"),
        ("--kafka-listener-security-protocol-map", "A:TLS", "the protocol must be one of"),
        ("--kafka-listener-security-protocol-map", "A", "the protocol must be one of"),
        ("--kafka-peers", "INTERNAL://h:1", "no numeric ID@"),
        ("--kafka-peers", "2@INTERNAL://h:0", "1..65535"),
    ],
)
def test_bad_listener_syntax_is_a_usage_error_naming_the_text(flag, value, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args([*CLUSTER[:4], flag, value])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert flag in error and repr(value) in error and message in error


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"kafka": {"listen": LISTEN}, "token": "t"}, "--token"),
        (
            {
                "kafka": {"listen": LISTEN, "peers": KAFKA_PEERS[:1]},
                "peers": PEERS,
                "cluster_secret": b"s",
            },
            "one address on listener PLAINTEXT, got 2$",
        ),
        (
            {
                "kafka": {"listen": LISTEN, "peers": (KAFKA_PEERS[0], KAFKA_PEERS[0])},
                "peers": PEERS,
                "cluster_secret": b"s",
            },
            r"every broker of --peers \(2, 3\).*got 2, 2$",
        ),
    ],
)
def test_inconsistent_kafka_settings_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        config(**fields)


def test_every_listener_needs_every_peer_once():
    args = parse_args(
        [
            *CLUSTER,
            *NAMED,
            "--kafka-peers",
            "2@INTERNAL://broker-2:19092,3@INTERNAL://broker-3:19092,2@EXTERNAL://127.0.0.1:19092",
        ]
    )
    with pytest.raises(ValueError, match=r"one address on listener EXTERNAL, got 2$"):
        config_from_args(args, secret=b"s")
