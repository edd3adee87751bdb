"""One client connection: read a frame header, dispatch the body to its API handler, write the
answer (header and small body with `sendall`, fetched batches with `os.sendfile`).

Stream discipline: whatever a handler does, the unread rest of the frame is drained (in
bounded chunks) before the answer goes out, so every error answer leaves the connection usable.
The connection is closed instead when the frame cannot be trusted or bounded: a length below
the header, a frame above `frame_bytes_max` (answered FrameTooLarge first, never read), a
broken or stalled socket, a body still arriving `read_timeout_s` after its header (see
body.py), a failed or missing authentication.

Deferred replies (a produce waiting for its acks, see reply.py): the connection thread hands
each one to a short-lived thread that waits for it and sends it, and goes on reading the
client's next request, so pipelined produces keep the leader appending while earlier batches
replicate. At most `DEFERRED_REPLIES_MAX` wait at once per connection (beyond that the
connection thread waits: back-pressure, bounded by the time the earlier ones can take -- ack
timeout plus send timeout -- after which the produce, already appended, is answered
NOT_ENOUGH_REPLICAS: retriable, and its idempotent retry is answered from its journal entry);
every send takes `_send_lock`, so frames never interleave; the connection closes only after
its deferred replies went out.

Used by its own thread, plus the deferred-reply threads (sends only, under `_send_lock`);
waiting for frames and stopping are connection_loop.py's, shared with the Kafka listener.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from common.kaska.errors import (
    AuthenticationError,
    FrameTooLargeError,
    InvalidRequestError,
    KaskaError,
    NotEnoughReplicasError,
    UnknownServerError,
    UnsupportedVersionError,
)
from common.kaska.protocol.frames import (
    REQUEST_HEADER,
    Api,
    ErrorBody,
    RequestHeader,
    decode_request_header,
    encode_response_header,
)
from services.broker.context import BrokerContext
from services.broker.handlers import HANDLERS
from services.broker.network.body import ReceiveBuffer, RequestBody
from services.broker.network.connection_loop import ConnectionLoop
from services.broker.network.peer_gate import PeerSession
from services.broker.network.reply import DeferredReply, Reply

log = logging.getLogger(__name__)

WIRE_CODE_MASK = 0xFFFF
DEFERRED_REPLIES_MAX = 16


class Connection(ConnectionLoop):
    head_name = "frame header"

    def __init__(self, sock: socket.socket, peer: str, ctx: BrokerContext,
                 on_closed: Callable[[Connection], None]) -> None:
        super().__init__(sock, peer, REQUEST_HEADER.size)
        self._ctx = ctx
        self._on_closed = on_closed
        self._authenticated = ctx.config.token is None
        self._receive_buffer = ReceiveBuffer()  # request bodies land here, off every lock
        self._send_lock = threading.Lock()
        self._deferred_done = threading.Condition(threading.Lock())
        self._deferred_pending = 0
        self._peer_session = PeerSession(peer.rpartition(":")[0] or peer)

    # -- the connection's own thread ---------------------------------------------------------

    def run(self) -> None:
        try:
            network = self._ctx.config.network
            self._serve(network.read_timeout_s, network.idle_timeout_s)
        except OSError as exc:
            log.debug("connection %s ended: %r", self.peer, exc)
        finally:
            # Deferred replies are bounded by the ack timeout; do not outwait that.
            self._wait_deferred(lambda pending: pending == 0,
                                self._ctx.config.ack_timeout_s + 1.0)
            self._sock.close()
            self._on_closed(self)

    def _serve_frame(self, raw: bytes) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        try:
            header = decode_request_header(raw)
        except InvalidRequestError as exc:
            log.info("closing %s: %s", self.peer, exc)
            return False
        started_s = time.perf_counter()  # kaska_request_duration_seconds (request_durations.py)
        config = self._ctx.config
        if header.body_bytes > config.network.frame_bytes_max:
            self._send_error(header.api, header.correlation_id, FrameTooLargeError(
                f"frame of {header.length} bytes over frame_bytes_max "
                f"{config.network.frame_bytes_max}"), started_s)
            return False
        if not self._authenticated and header.api != Api.AUTHENTICATE:
            self._send_error(header.api, header.correlation_id,
                             AuthenticationError("authenticate first: this broker needs a token"),
                             started_s)
            return False
        body = RequestBody(self._sock, header.body_bytes, timeout_s=config.network.read_timeout_s,
                           session=self._peer_session, buffer=self._receive_buffer,
                           version=header.version)
        reply, error = self._dispatch(header, body)
        if isinstance(error, FrameTooLargeError):
            self._send_error(header.api, header.correlation_id, error, started_s)
            return False
        body.drain()
        if error is not None:
            self._send_error(header.api, header.correlation_id, error, started_s)
            return self._authenticated
        if isinstance(reply, DeferredReply):
            self._defer(header.api, header.correlation_id, reply, started_s)
            return True
        self._send_reply(header.api, header.correlation_id, reply, started_s)
        if header.api == Api.AUTHENTICATE:
            self._authenticated = True
        return True

    def _dispatch(self, header: RequestHeader,
                  body: RequestBody) -> tuple[Reply | None, KaskaError | None]:
        handler = HANDLERS.get(header.api)
        try:
            if handler is None:
                raise InvalidRequestError(f"unknown api {header.api}")
            if header.version not in handler.versions:
                raise UnsupportedVersionError(
                    f"api {Api(header.api).name} has no version {header.version}")
            return handler.handle(self._ctx, body), None
        except KaskaError as error:
            return None, error
        except OSError:
            raise
        except Exception:
            # A bug in one handler must cost one request, not the connection or the broker.
            log.exception("api %d from %s failed", header.api, self.peer)
            return None, UnknownServerError("internal error in the broker")

    # -- deferred replies --------------------------------------------------------------------

    def _defer(self, api: int, correlation_id: int, deferred: DeferredReply,
               started_s: float) -> None:
        config = self._ctx.config
        # Never an unbounded hold of an appended produce (it would be answered late or never,
        # though replicated): the replies ahead of it are each done within their ack wait and
        # one send.
        bound_s = config.ack_timeout_s + config.network.read_timeout_s
        if not self._wait_deferred(lambda pending: pending < DEFERRED_REPLIES_MAX, bound_s):
            self._send_error(api, correlation_id, NotEnoughReplicasError(
                f"{DEFERRED_REPLIES_MAX} earlier answers still pending after {bound_s:.0f} s; "
                "retry"), started_s)
            return
        with self._deferred_done:
            self._deferred_pending += 1
        threading.Thread(target=self._complete, args=(api, correlation_id, deferred, started_s),
                         daemon=True, name=f"kaska-reply-{self.peer}").start()

    def _complete(self, api: int, correlation_id: int, deferred: DeferredReply,
                  started_s: float) -> None:
        try:
            try:
                reply = deferred.wait()
            except KaskaError as error:
                self._send_error(api, correlation_id, error, started_s)
            else:
                self._send_reply(api, correlation_id, reply, started_s)
        except OSError as exc:  # the client left; the connection thread sees it too
            log.debug("deferred reply to %s not sent: %r", self.peer, exc)
        finally:
            with self._deferred_done:
                self._deferred_pending -= 1
                self._deferred_done.notify_all()

    def _wait_deferred(self, ready, timeout_s: float | None = None) -> bool:
        with self._deferred_done:
            return self._deferred_done.wait_for(lambda: ready(self._deferred_pending),
                                                timeout_s)

    # -- sending -----------------------------------------------------------------------------

    # Both count the answer once it went out whole (metrics: requests, bytes and records out,
    # and the seconds since `started_s`, when the request's header was read).

    def _send_error(self, api: int, correlation_id: int, error: KaskaError,
                    started_s: float) -> None:
        log.debug("answering %s to %s: %s", type(error).__name__, self.peer, error)
        body = ErrorBody.from_error(error).encode()
        code = error.code & WIRE_CODE_MASK
        with self._send_lock:
            self._sock.sendall(encode_response_header(correlation_id, code, len(body)) + body)
        self._ctx.metrics.answered(api, error, took_s=time.perf_counter() - started_s)

    def _send_reply(self, api: int, correlation_id: int, reply: Reply,
                    started_s: float) -> None:
        with self._send_lock:
            self._send_reply_locked(correlation_id, reply)
        self._ctx.metrics.answered(api, None, reply, took_s=time.perf_counter() - started_s)

    def _send_reply_locked(self, correlation_id: int, reply: Reply) -> None:
        head = encode_response_header(correlation_id, 0, reply.nbytes) + reply.body
        if not reply.slices:
            self._sock.sendall(head + reply.trailer)
            return
        self._sock.sendall(head, socket.MSG_MORE)
        out_fd = self._sock.fileno()
        for piece in reply.slices:
            position, left = piece.position, piece.nbytes
            while left:
                sent = os.sendfile(out_fd, piece.fd, position, left)
                if sent == 0:
                    # The frame length is already on the wire; the stream cannot be repaired.
                    raise ConnectionAbortedError("segment file ended inside a fetch slice")
                position += sent
                left -= sent
        if reply.trailer:
            self._sock.sendall(reply.trailer)
