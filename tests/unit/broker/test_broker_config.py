"""The broker's settings: the flags come from the declarations and read back as declared."""

from pathlib import Path

import pytest

from common.address import Address
from services.broker.__main__ import config_from_args, parse_args
from services.broker.config import BrokerConfig, NetworkConfig
from services.broker.replication.config import PeerAddress, ReplicationConfig
from services.broker.storage.config import SEGMENT_HEADER_BYTES

REQUIRED = ["--node-id", "1", "--data-dir", "/d"]


def test_parsed_defaults_are_the_declared_defaults(monkeypatch):
    monkeypatch.delenv("KASKA_TOKEN", raising=False)
    monkeypatch.delenv("FLIGHTS_KASKA_CLUSTER_ID", raising=False)
    declared = BrokerConfig(data_dir=Path("/d"), replication=ReplicationConfig(node_id=1))
    assert config_from_args(parse_args(REQUIRED)) == declared


def test_flags_in_ms_fill_fields_in_seconds():
    built = config_from_args(parse_args([*REQUIRED, "--election-timeout-ms-min", "250",
                                         "--election-timeout-ms-max", "750",
                                         "--quorum-timeout-ms", "1500"]))
    replication = built.replication
    assert (replication.election_timeout_min_s, replication.election_timeout_max_s,
            replication.quorum_timeout_s) == (0.25, 0.75, 1.5)


def test_every_layer_gets_its_own_flags():
    built = config_from_args(parse_args(
        [*REQUIRED, "--listen", "0.0.0.0:0", "--peers", "2@h:1", "--segment-bytes-max",
         "1048576", "--journal-entries-max", "10", "--replication-groups", "2"]), b"secret")
    assert built.network.listen == Address("0.0.0.0", 0)
    assert built.peers == (PeerAddress(2, "h", 1),)
    assert built.storage.segment_bytes_max == 1 << 20
    assert built.storage.batch_bytes_max == (1 << 20) - SEGMENT_HEADER_BYTES
    assert built.replication.journal_entries_max == 10
    assert built.groups == 2


def test_a_batch_fits_one_frame():
    built = BrokerConfig(data_dir=Path("/d"), replication=ReplicationConfig(node_id=1),
                         network=NetworkConfig(frame_bytes_max=4096))
    assert built.storage.batch_bytes_max == 4096
    assert built.network.control_body_bytes_max == 4096


@pytest.mark.parametrize("argv, message", [
    (["--listen", "nohost"], "--listen: invalid value 'nohost'"),
    (["--connections-max", "many"], "--connections-max: invalid value 'many'"),
    (["--peers", "2:h:1"], "expected ID@HOST:PORT"),
    (["--replication-fsync", "always"], "invalid choice: 'always'"),
])
def test_a_bad_flag_value_exits_2_naming_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*REQUIRED, *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--election-timeout-ms-min", "900", "--election-timeout-ms-max", "800"],
     "election_timeout_min_s <= election_timeout_max_s"),
    (["--quorum-timeout-ms", "100"], "quorum_timeout_s must be >= election_timeout_min_s"),
    (["--journal-entries-max", "1"], "journal_entries_max must be >= 2"),
    (["--peers", "1@h:1"], "--peers must name other brokers"),
    (["--peers", "2@h:1"], "needs the cluster secret"),
    (["--frame-bytes-max", "10"], "frame_bytes_max below 1 KiB"),
    (["--shutdown-handover-ms", "-1"], "shutdown_handover_ms must be >= 0"),
])
def test_values_that_parse_but_do_not_fit_are_refused_by_the_config(argv, message):
    with pytest.raises(ValueError, match=message):
        config_from_args(parse_args([*REQUIRED, *argv]))


def test_help_shows_every_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no line break inside a default
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = capsys.readouterr().out
    for shown in ("127.0.0.1:9092", "(default: 500)", "(default: 100000)", "$KASKA_TOKEN"):
        assert shown in text
