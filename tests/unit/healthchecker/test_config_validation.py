"""Configuration errors are named errors with a clear message, never asserts (which vanish
under `python -O`): ElectionConfig, SupervisionConfig, NodeConfig, probes and the command line."""

import math
import subprocess
import sys

import pytest

from healthchecker.__main__ import build_config, build_parser
from healthchecker.bully import ElectionConfig, ElectionConfigError
from healthchecker.errors import HealthCheckerConfigError
from healthchecker.monitor import ProbeConfigError, ProbeRunner, parse_probe
from healthchecker.node import NodeConfig, NodeConfigError
from healthchecker.supervision import SupervisionConfig, SupervisionConfigError
from tests.integration.healthchecker.local_cluster import REPO_ROOT


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"healthcheck_interval_s": 0}, "healthcheck_interval_s must be a positive"),
        ({"answer_timeout_s": -1.0}, "answer_timeout_s must be a positive"),
        ({"coordinator_timeout_s": math.nan}, "coordinator_timeout_s"),
        ({"announce_interval_s": math.inf}, "announce_interval_s"),
        ({"healthcheck_misses_max": 0}, "healthcheck_misses_max must be an integer >= 1"),
        ({"peer_ids": frozenset({1, 2})}, "node 1 is among its own peers"),
        ({"node_id": -1, "peer_ids": frozenset()}, "node_id must be an integer >= 0"),
        ({"peer_ids": frozenset({2, -1})}, "a peer id must be an integer >= 0"),
    ],
)
def test_election_config_errors(overrides, message):
    settings = {"node_id": 1, "peer_ids": frozenset({2, 3}), **overrides}
    with pytest.raises(ElectionConfigError, match=message):
        ElectionConfig(**settings)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"heartbeat_timeout_s": 0}, "heartbeat_timeout_s must be a positive"),
        ({"start_deadline_s": -5}, "start_deadline_s must be a positive"),
        ({"backoff_base_s": 5.0, "backoff_max_s": 1.0}, "must not exceed backoff_max_s"),
        ({"stable_after_s": math.nan}, "stable_after_s"),
        ({"start_deadlines": (("spark-*", 0),)}, "start deadline of 'spark-\\*'"),
        ({"start_deadlines": (("", 5.0),)}, "needs a service name pattern"),
        ({"start_deadline_growth_max": 0.5}, "start_deadline_growth_max"),
        ({"self_name": ""}, "self_name"),
    ],
)
def test_supervision_config_errors(overrides, message):
    with pytest.raises(SupervisionConfigError, match=message):
        SupervisionConfig(**{"self_name": "healthchecker-1", **overrides})


def test_config_errors_share_one_base_and_are_value_errors():
    for error in (ElectionConfigError, SupervisionConfigError, NodeConfigError,
                  ProbeConfigError):
        assert issubclass(error, HealthCheckerConfigError)
        assert issubclass(error, ValueError) and not issubclass(error, AssertionError)


def test_start_deadline_per_kind_first_match_wins():
    config = SupervisionConfig("hc", start_deadline_s=10.0,
                               start_deadlines=(("spark-master", 90.0), ("spark-*", 60.0)))
    assert config.start_deadline_for("spark-master") == 90.0
    assert config.start_deadline_for("spark-worker-2") == 60.0
    assert config.start_deadline_for("broker-1") == 10.0
    assert config.start_deadline_for("broker-1", misses=1) == 20.0
    assert config.start_deadline_for("broker-1", misses=50) == 40.0


def test_node_config_errors():
    election = ElectionConfig(1, frozenset({2}))
    base = dict(node_id=1, name="healthchecker-1", listen=("127.0.0.1", 0),
                peers={2: ("127.0.0.1", 1)}, heartbeat_listen=("127.0.0.1", 0),
                heartbeat_peers=(), secret=b"s", election=election,
                supervision=SupervisionConfig("healthchecker-1"))
    with pytest.raises(NodeConfigError, match="state_interval_s"):
        NodeConfig(**base, state_interval_s=0)
    with pytest.raises(NodeConfigError, match="differ from the addressed peers"):
        NodeConfig(**{**base, "peers": {3: ("127.0.0.1", 1)}})
    with pytest.raises(NodeConfigError, match="self_name"):
        NodeConfig(**{**base, "supervision": SupervisionConfig("other")})


def test_probe_errors():
    assert parse_probe("ui=http://spark:8080/json").http_path == "/json"
    assert parse_probe("ui=http://spark:8080").http_path == "/"
    for bad in ("nohost", "x=host", "x=host:0", "x=host:70000", "x=http://host:80/a b"):
        with pytest.raises(ProbeConfigError):
            parse_probe(bad)
    with pytest.raises(ProbeConfigError, match="interval_s"):
        ProbeRunner([], table=None, interval_s=0)


# --- the command line -------------------------------------------------------------------------

REQUIRED = ["--node-id", "1", "--peers", "1@127.0.0.1:9001,2@127.0.0.1:9002",
            "--listen", "127.0.0.1:9001", "--secret", "s", "--backend", "process",
            "--registry", "/tmp/registry"]



def test_the_election_defaults_in_code_are_the_command_line_s():
    # Declared twice (the flags and the dataclass): a config built in code times like a checker.
    config = build_config(build_parser().parse_args(REQUIRED), b"s")
    assert config.election == ElectionConfig(1, frozenset({2}))


def test_peers_in_the_old_id_equals_syntax_are_read_with_one_warning(capsys):
    old = list(REQUIRED)
    old[old.index("--peers") + 1] = "1=127.0.0.1:9001,2=127.0.0.1:9002"
    args = build_parser().parse_args(old)
    assert args.peers == build_parser().parse_args(REQUIRED).peers
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and "deprecated" in warnings[0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--heartbeat-interval-s", "0"], "--heartbeat-interval-s: expected a positive number"),
        (["--healthcheck-interval-s", "nan"], "--healthcheck-interval-s: expected a positive"),
        (["--healthcheck-misses-max", "0"], "--healthcheck-misses-max: expected an integer"),
        (["--restart-grace-s", "-1"], "--restart-grace-s: expected a positive"),
        (["--start-deadline", "spark-*"], "--start-deadline: expected PATTERN=SECONDS"),
        (["--start-deadline", "spark-*=0"], "--start-deadline: expected a positive"),
        (["--probe", "spark-master"], "--probe: expected NAME=HOST:PORT"),
        (["--log-level", "LOUD"], "--log-level: expected one of"),
        (["--peers", "1@host"], "--peers: expected HOST:PORT"),
        (["--peers", "1@h:1,1@h:2"], "peer 1 is listed twice"),
        (["--listen", "127.0.0.1:99999"], "--listen: expected HOST:PORT, got '127.0.0.1:99999'"),
        (["--node-id", "one"], "--node-id: expected an integer"),
        (["--name", "x" * 129], "--name: expected 1..128 letters"),
        (["--name", "../etc"], "--name: expected 1..128 letters"),
    ],
)
def test_bad_command_line_values_are_rejected_with_the_flag_named(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(REQUIRED + flags)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_values_that_do_not_fit_together_are_rejected_by_name_even_under_python_O():
    argv = [sys.executable, "-O", "-m", "healthchecker", *REQUIRED,
            "--backoff-base-s", "5", "--backoff-max-s", "1"]
    result = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "SupervisionConfigError: backoff_base_s (5) must not exceed backoff_max_s (1)" in (
        result.stderr)


def test_every_former_flag_is_still_accepted_and_restart_grace_maps_to_the_start_deadline():
    former = ["--healthcheck-interval-s", "1", "--healthcheck-misses-max", "3",
              "--answer-timeout-s", "1", "--coordinator-timeout-s", "2",
              "--announce-interval-s", "2", "--heartbeat-interval-s", "1",
              "--heartbeat-timeout-s", "3", "--restart-grace-s", "30", "--backoff-base-s", "1",
              "--backoff-max-s", "30", "--stable-after-s", "30", "--probe-interval-s", "1",
              "--probe", "spark-master=spark-master:7077", "--checkpoint-dir", "/tmp/c",
              "--heartbeat-listen", "0.0.0.0:9001", "--heartbeat-peers", "2@h:9002",
              "--name", "healthchecker-1", "--log-level", "info"]
    config = build_config(build_parser().parse_args(REQUIRED + former), b"s")
    assert config.supervision.start_deadline_s == 30.0
    assert config.supervision.start_deadline_for("spark-worker-1") == 60.0
    both = build_parser().parse_args(REQUIRED + ["--restart-grace-s", "30",
                                                 "--start-deadline-s", "4"])
    assert build_config(both, b"s").supervision.start_deadline_s == 4.0
    default = build_config(build_parser().parse_args(REQUIRED), b"s")
    assert default.supervision.start_deadline_s == 10.0
    custom = build_parser().parse_args(REQUIRED + ["--start-deadline", "spark-*=120"])
    assert build_config(custom, b"s").supervision.start_deadline_for("spark-master") == 120.0
