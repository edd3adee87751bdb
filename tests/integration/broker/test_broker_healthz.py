"""A real broker process: /healthz beside /metrics, and `python -m common.probe` of it, live
and SIGSTOPped (a frozen process answers nothing: only the probe's deadline tells)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from common.probe import ProbeFailed, probe_http, probe_kaska
from scripts.launcher.ports import free_ports

pytestmark = pytest.mark.integration

PROBE_TIMEOUT_S = 1.0
# The probe gives up at its deadline; the rest is Python's start-up and the kernel.
FAILED_WITHIN_S = PROBE_TIMEOUT_S + 2.0


def _probe_command(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "common.probe", *argv],
                          capture_output=True, text=True, timeout=30)


def test_broker_healthz_answers_ok_and_the_probe_command_agrees(fresh_broker):
    (port,) = free_ports(1)
    broker = fresh_broker("--metrics-listen", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/healthz"
    with urllib.request.urlopen(url, timeout=5) as answer:
        assert (answer.status, answer.read()) == (200, b"ok\n")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert b"kaska_replication_role" in answer.read()  # /metrics unchanged beside it
    http = _probe_command(url)
    assert (http.returncode, http.stdout, http.stderr) == (0, "healthy: HTTP 200: ok\n", "")
    kaska = _probe_command("kaska", broker.address)
    assert kaska.returncode == 0, kaska.stderr
    assert "answered METADATA" in kaska.stdout


def test_a_sigstopped_brokers_probes_fail_within_their_timeout(fresh_broker):
    (port,) = free_ports(1)
    broker = fresh_broker("--metrics-listen", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/healthz"
    host_port = broker.host_port
    broker.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(ProbeFailed):
            probe_http(url, PROBE_TIMEOUT_S)
        assert time.monotonic() - started < FAILED_WITHIN_S
        started = time.monotonic()
        with pytest.raises(ProbeFailed, match="RequestTimedOutError"):
            probe_kaska(host_port, PROBE_TIMEOUT_S)
        assert time.monotonic() - started < FAILED_WITHIN_S
        command = _probe_command("--timeout-s", str(PROBE_TIMEOUT_S), url)
        assert command.returncode == 1
        assert command.stderr.startswith("unhealthy: ") and command.stderr.count("\n") == 1
    finally:
        broker.signal(signal.SIGCONT)
    # resumed: healthy at once (it was stopped for less than --healthz-stale-s, default 10 s)
    assert probe_http(url, 5.0) == "HTTP 200: ok"
