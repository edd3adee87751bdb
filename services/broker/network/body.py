"""The unread body of the request frame being served, read straight from the socket.

A `RequestBody` knows how many bytes of the current frame are still on the wire, so whatever
a handler reads (or does not read, when it fails early), the connection can drain the rest and
stay in step with the frame boundaries. Used by one connection thread only.

The body must arrive within `timeout_s` (the connection passes `read_timeout_s`): the
socket's own timeout bounds each `recv` only, so a client trickling a byte now and then must
not be able to keep a connection thread forever. Checked after each `recv`: reading takes at
most the deadline plus one socket timeout.

No lock is ever held while a body is on the wire: a PRODUCE batch lands first in the
connection's `ReceiveBuffer` (`receive_rest`, reused from frame to frame: no allocation per
batch), and only then is it copied into the log under the partition's append lock, so a slow
or frozen producer stalls only itself, never the other producers of its partition.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from common.kaska.errors import FrameTooLargeError, InvalidRequestError

DRAIN_CHUNK_BYTES = 64 * 1024
# A connection keeps a landing area up to this size between frames; a larger body gets one of
# its own, so an idle connection never pins more than this.
RECEIVE_BUFFER_KEEP_BYTES_MAX = 4 * 1024 * 1024


class PeerClosedError(ConnectionError):
    """The client closed the connection in the middle of a frame."""


class SlowPeerError(TimeoutError):
    """The body of a frame kept arriving past its deadline."""


class ReceiveBuffer:
    """One connection's reusable landing area for request bodies (one thread only)."""

    def __init__(self, keep_bytes_max: int = RECEIVE_BUFFER_KEEP_BYTES_MAX) -> None:
        self._keep_bytes_max = keep_bytes_max
        self._buf = bytearray()

    def view(self, nbytes: int) -> memoryview:
        """A writable view of `nbytes`; valid until the next call."""
        if nbytes > self._keep_bytes_max:
            return memoryview(bytearray(nbytes))
        if len(self._buf) < nbytes:
            # A new array, never a resize: a view of the old one may still be alive.
            self._buf = bytearray(min(max(nbytes, 2 * len(self._buf)), self._keep_bytes_max))
        return memoryview(self._buf)[:nbytes]


class RequestBody:
    def __init__(self, sock: socket.socket, nbytes: int, timeout_s: float = float("inf"),
                 clock: Callable[[], float] = time.monotonic, session=None,
                 buffer: ReceiveBuffer | None = None, version: int = 0) -> None:
        """`timeout_s`: how long after now the rest may take to arrive. `session`: the
        connection's PeerSession (peer_gate.py), for replication requests. `buffer`: the
        connection's landing area for `receive_rest`. `version`: the request header's API
        version (the connection checked the handler serves it)."""
        assert nbytes >= 0 and timeout_s > 0
        self.session = session
        self.version = version
        self._buffer = buffer if buffer is not None else ReceiveBuffer()
        self._sock = sock
        self.remaining = nbytes
        self._clock = clock
        self._deadline_s = clock() + timeout_s

    def read_exact(self, nbytes: int) -> bytes:
        """The next nbytes; InvalidRequestError if the frame holds fewer."""
        if nbytes > self.remaining:
            raise InvalidRequestError(f"body ends early: {nbytes} bytes wanted, "
                                      f"{self.remaining} left in the frame")
        buf = bytearray(nbytes)
        self._fill(memoryview(buf))
        return bytes(buf)

    def read_all(self, bytes_max: int) -> bytes:
        """The whole rest of the body; FrameTooLargeError (nothing read) above bytes_max."""
        if self.remaining > bytes_max:
            raise FrameTooLargeError(f"request body of {self.remaining} bytes, this api takes "
                                     f"at most {bytes_max}")
        return self.read_exact(self.remaining)

    def receive_rest(self) -> memoryview:
        """The whole rest of the body, in the connection's buffer (valid until the next frame's
        `receive_rest`); the frame size was bounded before the body was read."""
        view = self._buffer.view(self.remaining)
        self._fill(view)
        return view

    def _fill(self, view: memoryview) -> None:
        # Count what arrived even if the stream breaks halfway, so `remaining` stays true.
        size = len(view)
        got = 0
        try:
            while got < size:
                n = self._sock.recv_into(view[got:])
                if n == 0:
                    raise PeerClosedError(f"stream ended {size - got} bytes short")
                got += n
                if got < size and self._clock() > self._deadline_s:
                    raise SlowPeerError(f"frame body still {size - got} bytes short at its "
                                        "deadline")
        finally:
            self.remaining -= got

    def drain(self) -> None:
        """Read and drop what is left of the frame, in bounded chunks."""
        scratch = memoryview(bytearray(min(self.remaining, DRAIN_CHUNK_BYTES)))
        while self.remaining:
            self._fill(scratch[:min(self.remaining, len(scratch))])
