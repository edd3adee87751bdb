"""A real broker child process on 127.0.0.1 for integration tests, plus raw-frame helpers."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from common.kaska.protocol.frames import RESPONSE_HEADER, encode_request
from common.kaska.retry import RetryPolicy

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 30.0
# Short enough for failure tests, long enough to ride out a broker restart (~1 s).
TEST_RETRY = RetryPolicy(retries_max=8, backoff_s_initial=0.02, backoff_s_max=0.5)
CLIENT_OPTIONS = {"retry": TEST_RETRY, "request_timeout_s": 10.0, "connect_timeout_s": 2.0}
# For tests that expect a retriable error (e.g. an unknown topic) to come back quickly.
FAST_FAIL_OPTIONS = {**CLIENT_OPTIONS, "retry": RetryPolicy(1, 0.01, 0.01)}


class BrokerProcess:
    def __init__(self, data_dir: Path, *extra_args: str, port: int = 0) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.broker.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def host_port(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def start(self) -> BrokerProcess:
        """Start and wait for the readiness line; a restart reuses the port it got first."""
        command = [sys.executable, "-m", "services.broker", "--node-id", "1",
                   "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir),
                   *self.extra_args]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("KASKA_TOKEN", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                         stderr=log)
        line = self._ready_line()
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def _ready_line(self) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(READY_TIMEOUT_S):
                self.kill()
                raise TimeoutError(f"broker not ready in {READY_TIMEOUT_S} s: {self.tail()}")
        line = self.proc.stdout.readline().decode().strip()
        if "listening on" not in line:
            self.proc.wait(5)
            raise RuntimeError(f"broker failed to start ({line!r}): {self.tail()}")
        return line

    def tail(self, nbytes: int = 3000) -> str:
        return self.log_path.read_bytes()[-nbytes:].decode(errors="replace")

    def terminate(self, timeout_s: float = 10.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds it took)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        self.proc.stdout.close()
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None:
            self.proc.stdout.close()

    def restart(self) -> BrokerProcess:
        code, _ = self.terminate()
        assert code == 0, self.tail()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# -- raw frames ---------------------------------------------------------------------------

def raw_connect(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection(broker.host_port, timeout=10)
    return sock


def send_request(sock: socket.socket, api: int, body: bytes, correlation_id: int = 1,
                 version: int = 0) -> None:
    sock.sendall(encode_request(api, correlation_id, body, version))


def read_answer(sock: socket.socket) -> tuple[int, int, bytes] | None:
    """(correlation id, error code, body), or None when the broker closed the connection."""
    head = _recv_exactly(sock, RESPONSE_HEADER.size)
    if head is None:
        return None
    length, correlation_id, code = RESPONSE_HEADER.unpack(head)
    body = _recv_exactly(sock, length - 6)
    if body is None:
        return None
    return correlation_id, code, body


def closed_by_peer(sock: socket.socket) -> bool:
    """True when the broker has closed (EOF or reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _recv_exactly(sock: socket.socket, nbytes: int) -> bytes | None:
    chunks, got = [], 0
    while got < nbytes:
        try:
            chunk = sock.recv(nbytes - got)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def frame_header(length: int, api: int, version: int = 0, correlation_id: int = 1) -> bytes:
    return struct.pack(">IHHI", length, api, version, correlation_id)
