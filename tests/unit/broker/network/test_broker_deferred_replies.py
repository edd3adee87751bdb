"""connection.py's deferred replies: the hold of an appended produce waiting for a free slot is
bounded (an unbounded hold would leave a replicated batch unanswered), and the produce is then
answered with a retriable error."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

from common.kaska.errors import NotEnoughReplicasError
from common.kaska.protocol.frames import RESPONSE_HEADER, Api, decode_response_header
from services.broker.metrics import BrokerCounters
from services.broker.network.connection import DEFERRED_REPLIES_MAX, Connection
from services.broker.network.reply import DeferredReply, Reply

ACK_TIMEOUT_S = 0.2
READ_TIMEOUT_S = 0.3
WAIT_S = 10.0


def read_frame(sock: socket.socket) -> tuple[int, int]:
    """(correlation id, error code) of the next answer."""
    head = b""
    while len(head) < RESPONSE_HEADER.size:
        chunk = sock.recv(RESPONSE_HEADER.size - len(head))
        assert chunk, "the connection closed"
        head += chunk
    header = decode_response_header(head)
    body_bytes = header.body_bytes
    while body_bytes:
        body_bytes -= len(sock.recv(body_bytes))
    return header.correlation_id, header.error_code


def test_a_produce_behind_stuck_replies_is_answered_within_the_bound():
    server_side, client_side = socket.socketpair()
    client_side.settimeout(WAIT_S)
    config = SimpleNamespace(ack_timeout_s=ACK_TIMEOUT_S, token=None,
                             network=SimpleNamespace(read_timeout_s=READ_TIMEOUT_S))
    connection = Connection(server_side, "test", SimpleNamespace(
        config=config, metrics=BrokerCounters()), on_closed=lambda _c: None)
    release = threading.Event()

    def stuck() -> Reply:
        release.wait(WAIT_S)  # an answer that takes longer than it may (a frozen wait)
        return Reply(b"")

    try:
        for correlation_id in range(DEFERRED_REPLIES_MAX):
            connection._defer(Api.PRODUCE, correlation_id, DeferredReply(stuck),
                              time.perf_counter())
        assert connection._deferred_pending == DEFERRED_REPLIES_MAX  # every slot taken
        started = time.monotonic()
        connection._defer(Api.PRODUCE, 99, DeferredReply(lambda: Reply(b"")),
                          time.perf_counter())
        held_s = time.monotonic() - started
        assert ACK_TIMEOUT_S + READ_TIMEOUT_S - 0.05 <= held_s < WAIT_S / 2
        assert read_frame(client_side) == (99, NotEnoughReplicasError.code)
    finally:
        release.set()
        assert connection._wait_deferred(lambda pending: pending == 0, WAIT_S)
        server_side.close()
        client_side.close()
