"""`--shutdown-handover-ms`: the flag reaches the config, 0 turns the hand-over off, a negative
bound is refused at start."""

from pathlib import Path

import pytest

from services.broker.__main__ import config_from_args, parse_args
from services.broker.config import BrokerConfig
from services.broker.replication.config import ReplicationConfig


def test_the_flag_reaches_the_config_and_defaults_to_two_seconds():
    args = ["--node-id", "1", "--data-dir", "/d"]
    assert config_from_args(parse_args(args)).shutdown_handover_ms == 2000
    built = config_from_args(parse_args([*args, "--shutdown-handover-ms", "0"]))
    assert built.shutdown_handover_ms == 0


def test_a_negative_hand_over_bound_is_refused():
    with pytest.raises(ValueError, match="shutdown_handover_ms must be >= 0"):
        BrokerConfig(data_dir=Path("/nonexistent"), replication=ReplicationConfig(node_id=1),
                     shutdown_handover_ms=-1)
