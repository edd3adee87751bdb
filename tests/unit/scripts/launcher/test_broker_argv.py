"""One broker command line for every launcher: what broker_argv writes, the broker reads back."""

from pathlib import Path

from common.address import Address, Peer
from scripts.launcher.local_cluster import BrokerSpec, broker_argv
from services.broker.__main__ import config_from_args, parse_args


def parsed(spec: BrokerSpec):
    argv = broker_argv(spec)
    assert argv[:2] == ["-m", "services.broker"]
    return parse_args(argv[2:])


def test_a_cluster_of_one_needs_only_id_listen_and_data():
    spec = BrokerSpec(1, Path("/d"))
    assert broker_argv(spec) == ["-m", "services.broker", "--node-id", "1",
                                 "--listen", "127.0.0.1:0", "--data-dir", "/d"]


def test_every_field_reaches_the_broker_as_given():
    spec = BrokerSpec(2, Path("/d2"), Address("127.0.0.1", 9002),
                      peers=(Peer(1, "h1", 9001), Peer(3, "::1", 9003)),
                      secret_file=Path("/s"), metrics_listen=Address("127.0.0.1", 9102),
                      kafka_listen=Address("0.0.0.0", 19092),
                      kafka_peers=(Peer(1, "h1", 19091), Peer(3, "h3", 19093)),
                      heartbeat_targets=(Address("hc", 9500),),
                      extra_args=("--journal-entries-max", "10"))
    args = parsed(spec)
    config = config_from_args(args, secret=b"s")
    assert config.node_id == 2 and config.data_dir == Path("/d2")
    assert config.network.listen == spec.listen
    assert [(peer.node_id, peer.host, peer.port) for peer in config.peers] == [
        (1, "h1", 9001), (3, "::1", 9003)]
    assert config.kafka.listen == spec.kafka_listen
    assert [(peer.node_id, peer.name, peer.host, peer.port) for peer in config.kafka.peers] == [
        (1, "PLAINTEXT", "h1", 19091), (3, "PLAINTEXT", "h3", 19093)]
    assert config.replication.journal_entries_max == 10
    assert args.secret_file == Path("/s") and args.metrics_listen == ("127.0.0.1", 9102)
    assert args.heartbeat_targets == (("hc", 9500),)
