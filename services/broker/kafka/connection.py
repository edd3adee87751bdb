"""One Kafka client connection: read a size-prefixed request, answer it, in order.

Kafka clients match answers to requests by order as well as by correlation id (kafka-python
insists on it): every answer goes through the connection's OrderedAnswers (answers.py), whose
thread sends them in request order, waiting for a Produce's acks where needed while this
thread reads the next request. At most `ANSWERS_PENDING_MAX` answers wait at once (then the
reading waits: back-pressure); the connection closes only once they went out, or failed.

Bounds, as connection.py's: a request above `request_bytes_max` is answered MESSAGE_TOO_LARGE
from its first 8 bytes and the connection closed (its rest is never read); a size below a
request header closes at once (no correlation id to answer); the body must arrive within
`read_timeout_s` (body.py); an idle connection closes after `idle_timeout_s`; sends are bounded
by SO_SNDTIMEO. Whatever the frame holds, its size keeps the stream in step, so a garbage body
costs an error answer, not the connection.

Used by its own thread; `interrupt()` and `force_close()` are the only methods other threads
call, and they only touch the socket under `_state_lock`.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

from services.broker.body import ReceiveBuffer, RequestBody
from services.broker.kafka import requests
from services.broker.kafka.answers import OrderedAnswers
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import MESSAGE_TOO_LARGE
from services.broker.kafka.framing import (
    FIXED_HEADER_BYTES,
    FRAME_SIZE_BYTES,
    encode_error_only,
    frame_size,
    parse_fixed_header,
)

log = logging.getLogger(__name__)

# librdkafka keeps at most 5 requests in flight per connection with idempotence; a few more
# leave room for the metadata and heartbeats in between.
ANSWERS_PENDING_MAX = 16


class StalledPeerError(TimeoutError):
    """A request size started arriving and then stopped for longer than read_timeout_s."""


class KafkaConnection:
    def __init__(self, sock: socket.socket, peer: str, kctx: KafkaContext,
                 on_closed: Callable[[KafkaConnection], None], request_bytes_max: int) -> None:
        self._sock = sock
        self.peer = peer
        self._kctx = kctx
        self._on_closed = on_closed
        self._request_bytes_max = request_bytes_max
        self._state_lock = threading.Lock()
        self._busy = False
        self._closing = False
        self._receive_buffer = ReceiveBuffer()
        self._answers: OrderedAnswers | None = None

    # -- called by other threads -------------------------------------------------------------

    def interrupt(self) -> None:
        """End the connection: at once when idle, after the request in flight otherwise."""
        with self._state_lock:
            self._closing = True
            if not self._busy:
                self._shutdown(socket.SHUT_RD)

    def force_close(self) -> None:
        with self._state_lock:
            self._closing = True
            self._shutdown(socket.SHUT_RDWR)

    def _shutdown(self, how: int) -> None:
        try:
            self._sock.shutdown(how)
        except OSError as exc:  # already disconnected: nothing left to wake
            log.debug("shutdown of %s: %s", self.peer, exc)

    # -- the connection's own thread ---------------------------------------------------------

    def run(self) -> None:
        self._answers = OrderedAnswers(self._sock.sendall, ANSWERS_PENDING_MAX, self.peer)
        try:
            self._serve()
        except OSError as exc:
            log.debug("kafka connection %s ended: %r", self.peer, exc)
        finally:
            config = self._kctx.broker.config
            # Each queued answer is bounded by its ack wait and one send.
            if not self._answers.close(ANSWERS_PENDING_MAX * config.network.read_timeout_s
                                       + config.ack_timeout_s):
                log.error("kafka connection %s: answers still pending at close", self.peer)
            self._sock.close()
            self._on_closed(self)

    def _serve(self) -> None:
        while True:
            size = self._read_size()
            if size is None:
                return
            with self._state_lock:
                if self._closing:
                    return
                self._busy = True
            try:
                keep_open = self._serve_frame(size)
            finally:
                with self._state_lock:
                    self._busy = False
                    closing = self._closing
            if not keep_open or closing:
                return

    def _read_size(self) -> int | None:
        """The next request's size; None when the client leaves or stays idle too long."""
        config = self._kctx.broker.config
        raw = bytearray(FRAME_SIZE_BYTES)
        view = memoryview(raw)
        got = 0
        idle_s = 0.0
        while got < FRAME_SIZE_BYTES:
            try:
                n = self._sock.recv_into(view[got:])
            except BlockingIOError as exc:
                if got:
                    raise StalledPeerError(f"request size from {self.peer} stalled") from exc
                idle_s += config.network.read_timeout_s
                if idle_s >= config.network.idle_timeout_s:
                    log.info("closing idle kafka connection %s", self.peer)
                    return None
                continue
            if n == 0:
                return None
            got += n
        return frame_size(bytes(raw))

    def _serve_frame(self, size: int) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        if size < FIXED_HEADER_BYTES:
            log.info("closing kafka connection %s: request of %d bytes", self.peer, size)
            return False
        body = RequestBody(self._sock, size,
                           timeout_s=self._kctx.broker.config.network.read_timeout_s,
                           buffer=self._receive_buffer)
        if size > self._request_bytes_max:
            fixed = parse_fixed_header(body.read_exact(FIXED_HEADER_BYTES))
            log.info("closing kafka connection %s: request of %d bytes over %d", self.peer, size,
                     self._request_bytes_max)
            self._answers.put(encode_error_only(fixed.correlation_id, MESSAGE_TOO_LARGE))
            return False
        frame = body.read_exact(size)
        answer = requests.answer(self._kctx, frame, self.peer)
        if answer is not None:
            self._answers.put(answer)
        return not self._answers.broken
