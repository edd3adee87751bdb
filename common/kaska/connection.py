"""One TCP connection from a client to one broker, multiplexing requests by correlation id.

Any thread may send; frames are written whole under a send lock. A reader thread matches each
response to its pending request by correlation id. When the connection breaks (the broker
closes it, a send fails, a response cannot be parsed, a request times out) the connection is
dead for good: every pending request fails with ConnectionLostError at once, later sends
raise it immediately, and the caller's retry logic opens a new connection.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass

from common.kaska.errors import (
    BrokerUnavailableError,
    ConnectionLostError,
    InvalidResponseError,
    KaskaError,
    LeaderMovedError,
    RequestTimedOutError,
    error_for_code,
)
from common.kaska.protocol import RESPONSE_TYPES
from common.kaska.protocol.authenticate import AuthenticateRequest
from common.kaska.protocol.frames import (
    CORRELATION_ID_MODULUS,
    RESPONSE_HEADER,
    VERSION,
    ErrorBody,
    decode_response_header,
    encode_request_header,
)

log = logging.getLogger(__name__)

RESPONSE_BYTES_MAX_DEFAULT = 64 * 1024 * 1024 + 64 * 1024


@dataclass(frozen=True, slots=True)
class RequestWatch:
    """How a client keeps an unanswered request honest. A leader that is frozen (SIGSTOP) or
    cut off still holds the connection open, so the request timeout alone would make every
    caller wait it out; from `after_s` into the wait, and every `every_s` after that,
    `still_worth_waiting()` asks elsewhere (the other brokers' metadata). It returns None to
    go on waiting, or why not (a newer leader is named), and the wait ends with
    LeaderMovedError."""

    still_worth_waiting: Callable[[], str | None]
    after_s: float
    every_s: float


def send_parts(sock: socket.socket, parts: list) -> None:
    """Write every part with scatter-gather sends: the parts (e.g. a 1 MiB batch) are never
    joined into a new buffer."""
    views = [memoryview(part) for part in parts if len(part)]
    while views:
        sent = sock.sendmsg(views)
        while sent:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def recv_exactly(sock: socket.socket, nbytes: int) -> bytearray | None:
    """nbytes from the socket; None when the stream ends first."""
    buf = bytearray(nbytes)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return buf


def error_from_answer(code: int, body: bytes) -> KaskaError:
    """The KaskaError a non-zero answer stands for, with the broker's message (and leader)."""
    try:
        detail = ErrorBody.decode(body)
    except InvalidResponseError:
        detail = ErrorBody(f"error code {code} with an unreadable body")
    error = error_for_code(code)(detail.message)
    error.leader = detail.leader
    return error


class BrokerConnection:
    def __init__(self, address: tuple[str, int], *, token: str | None = None,
                 connect_timeout_s: float = 5.0, request_timeout_s: float = 30.0,
                 response_bytes_max: int = RESPONSE_BYTES_MAX_DEFAULT) -> None:
        self.address = address
        self.request_timeout_s = request_timeout_s
        self._response_bytes_max = response_bytes_max
        try:
            self._sock = socket.create_connection(address, timeout=connect_timeout_s)
        except OSError as exc:
            raise BrokerUnavailableError(f"cannot connect to {address[0]}:{address[1]}: "
                                         f"{exc}") from exc
        self._sock.settimeout(None)
        if self._sock.family in (socket.AF_INET, socket.AF_INET6):
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        whole = int(request_timeout_s)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack(
            "ll", whole, int((request_timeout_s - whole) * 1_000_000)))
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._next_correlation_id = 0
        self._closed_because: str | None = None
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"kaska-client-{address[0]}:{address[1]}")
        self._reader.start()
        if token is not None:
            try:
                # Part of connecting: a paused broker accepts the connection (the kernel
                # does) but never answers, so it is bounded like the connect.
                self.request(AuthenticateRequest(token.encode()), connect_timeout_s)
            except KaskaError:
                self.close("authentication failed")
                raise

    @property
    def alive(self) -> bool:
        return self._closed_because is None

    @property
    def local_address(self) -> tuple[str, int]:
        """This end of the connection (host, port): what the broker sees as its peer."""
        return self._sock.getsockname()[:2]

    def send(self, api: int, parts: list, version: int = VERSION) -> Future:
        """Send one request; the future resolves to (error code, body bytes)."""
        body_bytes = sum(len(part) for part in parts)
        with self._lock:
            if self._closed_because is not None:
                raise ConnectionLostError(self._describe(self._closed_because))
            correlation_id = self._next_correlation_id
            self._next_correlation_id = (correlation_id + 1) % CORRELATION_ID_MODULUS
            future: Future = Future()
            self._pending[correlation_id] = future
            header = encode_request_header(api, correlation_id, body_bytes, version)
            try:
                send_parts(self._sock, [header, *parts])
            except OSError as exc:
                self._fail_locked(f"send failed: {exc}")
                raise ConnectionLostError(self._describe(f"send failed: {exc}")) from exc
        return future

    def request(self, request, timeout_s: float | None = None, *,
                watch: RequestWatch | None = None):
        """Send a protocol request object and wait for its decoded response.

        Raises the broker's error as its KaskaError class; RequestTimedOutError (and the
        connection is closed) when no answer comes within timeout_s. `watch`, while the answer
        is late, asks someone else whether waiting still makes sense (see RequestWatch).
        """
        parts = list(request.encode_parts()) if hasattr(request, "encode_parts") \
            else [request.encode()]
        # A request of a version other than 0 carries its version and decodes its answer.
        future = self.send(request.API, parts, getattr(request, "version", VERSION))
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        code, body = self._wait(future, timeout_s, watch)
        if code:
            raise error_from_answer(code, body)
        try:
            decode = getattr(request, "decode_response", RESPONSE_TYPES[request.API].decode)
            return decode(body)
        except InvalidResponseError as exc:
            self.close(f"unreadable answer: {exc}")
            raise

    def _wait(self, future: Future, timeout_s: float, watch: RequestWatch | None):
        started = time.monotonic()
        deadline = started + timeout_s
        next_look = started + watch.after_s if watch is not None else deadline
        while True:
            try:
                return future.result(max(0.0, min(deadline, next_look) - time.monotonic()))
            except FutureTimeoutError as exc:
                now = time.monotonic()
                if now >= deadline:
                    self.close(f"no answer within {timeout_s:.1f} s")
                    raise RequestTimedOutError(
                        self._describe(f"no answer within {timeout_s:.1f} s")) from exc
            verdict = watch.still_worth_waiting()
            if verdict is not None and not future.done():
                # The answer is abandoned, not the connection: other requests on it may
                # belong to partitions whose leader did not move. A late answer is dropped.
                raise LeaderMovedError(self._describe(
                    f"no answer after {time.monotonic() - started:.1f} s and {verdict}"))
            next_look = time.monotonic() + watch.every_s

    def close(self, reason: str = "closed by the client") -> None:
        with self._lock:
            self._fail_locked(reason)

    def _describe(self, reason: str) -> str:
        return f"connection to {self.address[0]}:{self.address[1]}: {reason}"

    def _fail_locked(self, reason: str) -> None:
        if self._closed_because is not None:
            return
        self._closed_because = reason
        pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(ConnectionLostError(self._describe(reason)))
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:  # already disconnected by the peer
            log.debug("shutdown: %s", exc)
        self._sock.close()

    def _read_loop(self) -> None:
        reason = "the broker closed the connection"
        try:
            while True:
                raw = recv_exactly(self._sock, RESPONSE_HEADER.size)
                if raw is None:
                    break
                header = decode_response_header(raw)
                if header.body_bytes > self._response_bytes_max:
                    reason = f"answer of {header.body_bytes} bytes over the client's bound"
                    break
                body = recv_exactly(self._sock, header.body_bytes)
                if body is None:
                    break
                with self._lock:
                    future = self._pending.pop(header.correlation_id, None)
                if future is None:
                    reason = f"answer to unknown correlation id {header.correlation_id}"
                    break
                future.set_result((header.error_code, body))
        except (OSError, InvalidResponseError) as exc:
            reason = f"read failed: {exc}"
        self.close(reason)
