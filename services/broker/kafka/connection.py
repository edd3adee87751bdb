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

Waiting for requests and stopping are ../network/connection_loop.py's, shared with Kaska's
connections.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

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
from services.broker.network.body import ReceiveBuffer, RequestBody
from services.broker.network.connection_loop import ConnectionLoop

log = logging.getLogger(__name__)

# librdkafka keeps at most 5 requests in flight per connection with idempotence; a few more
# leave room for the metadata and heartbeats in between.
ANSWERS_PENDING_MAX = 16


class KafkaConnection(ConnectionLoop):
    kind = "kafka connection"
    head_name = "request size"

    def __init__(self, sock: socket.socket, peer: str, kctx: KafkaContext,
                 on_closed: Callable[[KafkaConnection], None], request_bytes_max: int) -> None:
        super().__init__(sock, peer, FRAME_SIZE_BYTES)
        self._kctx = kctx
        self._on_closed = on_closed
        self._request_bytes_max = request_bytes_max
        self._receive_buffer = ReceiveBuffer()
        self._answers: OrderedAnswers | None = None

    # -- the connection's own thread ---------------------------------------------------------

    def run(self) -> None:
        self._answers = OrderedAnswers(self._sock.sendall, ANSWERS_PENDING_MAX, self.peer)
        config = self._kctx.broker.config
        try:
            self._serve(config.network.read_timeout_s, config.network.idle_timeout_s)
        except OSError as exc:
            log.debug("kafka connection %s ended: %r", self.peer, exc)
        finally:
            # Each queued answer is bounded by its ack wait and one send.
            if not self._answers.close(ANSWERS_PENDING_MAX * config.network.read_timeout_s
                                       + config.ack_timeout_s):
                log.error("kafka connection %s: answers still pending at close", self.peer)
            self._sock.close()
            self._on_closed(self)

    def _serve_frame(self, head: bytes) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        size = frame_size(head)
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
