"""Brokers with a Kafka listener for the Kafka-client tests, and a raw Kafka request helper."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from common.address import Address, parse_host_port
from tests.integration.broker.broker_process import BrokerProcess

WAIT_S = 60.0


class KafkaBroker(BrokerProcess):
    """A one-broker cluster listening for Kafka clients too (any free port, read back)."""

    def __init__(self, data_dir: Path, *extra_args: str, **spec) -> None:
        super().__init__(data_dir, *extra_args, kafka_listen=Address("127.0.0.1", 0), **spec)

    @property
    def kafka_port(self) -> int:
        return self.spec.kafka_listen.port


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = WAIT_S):
    """condition()'s first truthy value, polled until the deadline (AssertionError then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.05)


def kafka_request(address: str, request, correlation_id: int = 1, timeout_s: float = 10.0):
    """Send one kafka-python protocol request; its decoded response."""
    request.with_header(correlation_id=correlation_id, client_id="kaska-test")
    with socket.create_connection(parse_host_port(address), timeout=timeout_s) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        frame = recv_exactly(sock, size)
    response_class = request.header.get_response_class()
    response = response_class.decode(frame, header=True)
    assert response.header.correlation_id == correlation_id
    return response


def recv_exactly(sock: socket.socket, nbytes: int) -> bytes:
    chunks, got = [], 0
    while got < nbytes:
        chunk = sock.recv(nbytes - got)
        if not chunk:
            raise ConnectionError(f"closed {nbytes - got} bytes short")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
