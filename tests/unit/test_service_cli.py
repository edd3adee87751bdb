"""common/service_cli.py: the flags every service shares give a clear argparse error (exit 2,
the flag named) for a bad value, in every service's command line; and keep their defaults."""

from __future__ import annotations

import argparse
import signal

import pytest

from client.__main__ import build_parser as client_parser
from common import service_cli
from healthchecker.__main__ import build_parser as checker_parser
from services.broker.__main__ import parse_args as broker_args
from services.status.__main__ import build_parser as status_parser
from spark.service.__main__ import parse_args as query_service_args

BROKER = ["--node-id", "1", "--data-dir", "/tmp/unused"]
QUERY_SERVICE = ["--brokers", "h:1"]
STATUS = ["--brokers", "h:1", "--checkers", "h:2"]
CLIENT = ["--flights", "f.csv", "--airports", "a.csv", "--brokers", "h:1", "--results-dir", "r"]
CHECKER = ["--node-id", "1", "--peers", "1@h:1,2@h:2", "--listen", "h:1", "--backend",
           "process", "--log-level", "info"]
SERVICES = {
    "broker": (broker_args, BROKER),
    "query service": (query_service_args, QUERY_SERVICE),
    "status": (lambda argv: status_parser().parse_args(argv), STATUS),
    "client": (lambda argv: client_parser().parse_args(argv), CLIENT),
}
PARSERS = {**SERVICES, "health checker": (lambda argv: checker_parser().parse_args(argv),
                                          CHECKER)}


BAD_VALUES = [  # flag, value, what the error says
    *(("--heartbeat-interval-s", value, "expected a positive number of seconds")
      for value in ("0", "-1", "nan", "inf", "soon")),
    ("--log-level", "LOUD", "expected one of"),
]


@pytest.mark.parametrize("service", sorted(PARSERS))
@pytest.mark.parametrize("flag, value, says", BAD_VALUES)
def test_a_bad_value_is_a_clear_usage_error(service, flag, value, says, capsys):
    parse, argv = PARSERS[service]
    with pytest.raises(SystemExit) as exit_info:
        parse([*argv, flag, value])
    assert exit_info.value.code == 2
    assert f"{flag}: {says}" in capsys.readouterr().err


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_bad_heartbeat_targets_are_a_clear_usage_error(service, capsys):
    parse, argv = SERVICES[service]
    with pytest.raises(SystemExit) as exit_info:
        parse([*argv, "--heartbeat-targets", "hc-1:9500,nowhere"])
    assert exit_info.value.code == 2
    assert "--heartbeat-targets: expected HOST:PORT" in capsys.readouterr().err


def test_the_shared_flags_keep_their_defaults():
    args = broker_args(BROKER)
    assert (args.heartbeat_targets, args.heartbeat_interval_s, args.log_level,
            args.metrics_listen) == ((), 1.0, "INFO", None)
    args = broker_args([*BROKER, "--heartbeat-targets", "a:1, b:2", "--log-level", "warn",
                        "--heartbeat-interval-s", "0.5"])
    assert (args.heartbeat_targets, args.heartbeat_interval_s, args.log_level) == (
        (("a", 1), ("b", 2)), 0.5, "WARN")


def test_stop_signals_call_stop(monkeypatch):
    installed = {}
    monkeypatch.setattr(signal, "signal", lambda signum, handler: installed.update(
        {signum: handler}))
    calls = []
    service_cli.handle_stop_signals(lambda: calls.append("stop"))
    assert set(installed) == {signal.SIGTERM, signal.SIGINT}
    installed[signal.SIGTERM](signal.SIGTERM, None)
    assert calls == ["stop"]


def test_no_targets_no_heartbeats():
    assert service_cli.start_heartbeats("x", (), 1.0, None) is None
    with pytest.raises(argparse.ArgumentTypeError):
        service_cli.positive_s("0")
