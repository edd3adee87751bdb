"""A real broker child process on 127.0.0.1 for integration tests, plus raw-frame helpers."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from common.address import Address
from common.kaska.protocol.frames import RESPONSE_HEADER, encode_request
from common.kaska.retry import RetryPolicy
from scripts.launcher.local_cluster import BrokerSpec, LocalBroker

# Short enough for failure tests, long enough to ride out a broker restart (~1 s).
TEST_RETRY = RetryPolicy(retries_max=8, backoff_s_initial=0.02, backoff_s_max=0.5)
CLIENT_OPTIONS = {"retry": TEST_RETRY, "request_timeout_s": 10.0, "connect_timeout_s": 2.0}
# For tests that expect a retriable error (e.g. an unknown topic) to come back quickly.
FAST_FAIL_OPTIONS = {**CLIENT_OPTIONS, "retry": RetryPolicy(1, 0.01, 0.01)}


class BrokerProcess(LocalBroker):
    """Broker 1, a cluster of one, on 127.0.0.1 (any free port unless `port`; a restart keeps
    the port it got first); it inherits the environment but $KASKA_TOKEN. `spec`: further
    BrokerSpec fields (scripts/launcher/local_cluster.py)."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int = 0, **spec) -> None:
        super().__init__(BrokerSpec(1, data_dir, Address("127.0.0.1", port),
                                    extra_args=extra_args, **spec),
                         data_dir.parent / f"{data_dir.name}.broker.log",
                         env_dropped=("KASKA_TOKEN",))


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
