"""The unread body of the request frame being served, read straight from the socket.

A `RequestBody` knows how many bytes of the current frame are still on the wire, so whatever
a handler reads (or does not read, when it fails early), the connection can drain the rest and
stay in step with the frame boundaries. Used by one connection thread only.

The body must arrive within `timeout_s` (the connection passes `read_timeout_s`): the
socket's own timeout bounds each `recv` only, and a PRODUCE batch is received while the
partition's append lock is held, so a client trickling a byte now and then must not be able to
stall every producer of that partition. The PRODUCE handler re-arms the deadline once it holds
the lock (`rearm`), so time spent waiting for another producer is not held against this one.
Checked after each `recv`: reading takes at most the deadline plus one socket timeout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from common.kaska.errors import FrameTooLargeError, InvalidRequestError

DRAIN_CHUNK_BYTES = 64 * 1024


class PeerClosedError(ConnectionError):
    """The client closed the connection in the middle of a frame."""


class SlowPeerError(TimeoutError):
    """The body of a frame kept arriving past its deadline."""


class RequestBody:
    def __init__(self, sock: socket.socket, nbytes: int, timeout_s: float = float("inf"),
                 clock: Callable[[], float] = time.monotonic, session=None) -> None:
        """`timeout_s`: how long after now (or after `rearm`) the rest may take to arrive.
        `session`: the connection's PeerSession (peer_gate.py), for replication requests."""
        assert nbytes >= 0 and timeout_s > 0
        self.session = session
        self._sock = sock
        self.remaining = nbytes
        self._timeout_s = timeout_s
        self._clock = clock
        self._deadline_s = clock() + timeout_s

    def rearm(self) -> None:
        """Give what is left of the body a full `timeout_s` from now."""
        self._deadline_s = self._clock() + self._timeout_s

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

    def recv_into_exactly(self, region: memoryview) -> None:
        """Fill region (e.g. a reserved slice of the log's mmap) from the socket, zero copy."""
        if len(region) > self.remaining:
            raise InvalidRequestError(f"{len(region)} bytes wanted, {self.remaining} in frame")
        self._fill(region)

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
