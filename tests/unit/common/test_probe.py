"""`python -m common.probe` (common/probe.py): a URL against a local HTTP server, `kaska
HOST:PORT` against an in-process broker, and both against a listener that never answers (what
a SIGSTOPped process looks like from outside: the kernel accepts, nobody speaks)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from common.probe import EXIT_HEALTHY, EXIT_UNHEALTHY, ProbeFailed, main, probe_http, probe_kaska
from services.broker.config import BrokerConfig, NetworkConfig
from services.broker.replication.config import ReplicationConfig
from services.broker.server import BrokerServer

SHORT_TIMEOUT_S = 0.3


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        code, body = {"/healthz": (200, b"ok\n"),
                      "/sick": (503, b"replication loop made no progress for 12.0 s\n")}.get(
            self.path, (404, b"no such page\n"))
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base's signature
        pass


@pytest.fixture(scope="module")
def http_base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def silent_address():
    """Listens (so connecting succeeds) but never accepts nor answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerServer(BrokerConfig(
        data_dir=Path(tmp_path_factory.mktemp("probe-broker")),
        replication=ReplicationConfig(node_id=1),
        network=NetworkConfig(listen=("127.0.0.1", 0)))).start()
    yield server
    server.stop()


def test_http_2xx_is_healthy(http_base, capsys):
    assert probe_http(f"{http_base}/healthz", 3.0) == "HTTP 200: ok"
    assert main([f"{http_base}/healthz"]) == EXIT_HEALTHY
    assert capsys.readouterr().out == "healthy: HTTP 200: ok\n"


def test_http_503_is_unhealthy_with_the_services_reason(http_base, capsys):
    assert main([f"{http_base}/sick", "--timeout-s", "3"]) == EXIT_UNHEALTHY
    err = capsys.readouterr().err
    assert err == (f"unhealthy: HTTP 503 from {http_base}/sick: replication loop made no "
                   "progress for 12.0 s\n")


def test_http_refused_connection_is_unhealthy(capsys):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert main([f"http://127.0.0.1:{port}/healthz"]) == EXIT_UNHEALTHY
    assert "refused" in capsys.readouterr().err


def test_http_silence_fails_within_the_timeout(silent_address):
    host, port = silent_address
    started = time.monotonic()
    with pytest.raises(ProbeFailed, match="no answer within 0.3 s|timed out"):
        probe_http(f"http://{host}:{port}/healthz", SHORT_TIMEOUT_S)
    assert time.monotonic() - started < 5 * SHORT_TIMEOUT_S


def test_kaska_probe_of_a_live_broker_is_healthy(broker, capsys):
    host, port = broker.address
    assert "answered METADATA: 1 brokers, controller 1" in probe_kaska(broker.address, 3.0)
    assert main(["kaska", f"{host}:{port}"]) == EXIT_HEALTHY
    assert capsys.readouterr().out.startswith("healthy: kaska broker")


def test_kaska_silence_fails_within_the_timeout(silent_address, capsys):
    host, port = silent_address
    started = time.monotonic()
    assert main(["kaska", f"{host}:{port}", "--timeout-s", str(SHORT_TIMEOUT_S)]) \
        == EXIT_UNHEALTHY
    assert time.monotonic() - started < 5 * SHORT_TIMEOUT_S
    err = capsys.readouterr().err
    assert err.startswith(f"unhealthy: kaska broker {host}:{port}: RequestTimedOutError")
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv", [["kaska"], ["kaska", "nope"], ["ftp://x/"],
                                  ["http://x/", "extra"], ["http://x/", "--timeout-s", "0"]])
def test_bad_usage_exits_2(argv):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2


def test_the_token_variable_is_the_kaska_clients_and_a_url_probe_imports_no_kaska_client():
    import subprocess
    import sys

    from common import probe
    from common.kaska.cli import TOKEN_ENV

    assert probe.TOKEN_ENV == TOKEN_ENV
    # Compose runs the URL probe in every container every few seconds: its start stays light.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, common.probe; "
         "print(sorted(m for m in sys.modules if m.startswith(('common.kaska', 'prometheus'))))"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"
