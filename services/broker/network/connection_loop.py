"""What a connection of either listener (Kaska's connection.py, Kafka's kafka/connection.py)
does around its requests: wait for the next frame's first bytes (closing a connection idle for
`idle_timeout_s`, or one whose first bytes stall), serve the frame, and stop when told to.

Subclasses say how long a frame's head is and serve one frame (`_serve_frame(head)`: False
closes the connection). The socket's SO_RCVTIMEO is `read_timeout_s`, so an idle wait wakes up
that often to count towards `idle_timeout_s`.

Used by the connection's own thread; `interrupt()` and `force_close()` are the only methods
other threads call, and they only touch the socket under `_state_lock`.
"""

from __future__ import annotations

import logging
import socket
import threading

log = logging.getLogger(__name__)


class StalledPeerError(TimeoutError):
    """A frame's head started arriving and then stopped for longer than read_timeout_s."""


class ConnectionLoop:
    # What the logs call a connection of this listener, and the head it reads first.
    kind = "connection"
    head_name = "frame head"

    def __init__(self, sock: socket.socket, peer: str, head_bytes: int) -> None:
        self._sock = sock
        self.peer = peer
        self._head = bytearray(head_bytes)
        self._state_lock = threading.Lock()
        self._busy = False
        self._closing = False

    # -- called by other threads -------------------------------------------------------------

    def interrupt(self) -> None:
        """End the connection: at once when idle, after the request in flight otherwise."""
        with self._state_lock:
            self._closing = True
            if not self._busy:
                self._shutdown(socket.SHUT_RD)

    def force_close(self) -> None:
        """Break a request that outlived the shutdown grace period (its reads and sends fail)."""
        with self._state_lock:
            self._closing = True
            self._shutdown(socket.SHUT_RDWR)

    def _shutdown(self, how: int) -> None:
        try:
            self._sock.shutdown(how)
        except OSError as exc:  # already disconnected: nothing left to wake
            log.debug("shutdown of %s: %s", self.peer, exc)

    # -- the connection's own thread ---------------------------------------------------------

    def _serve_frame(self, head: bytes) -> bool:
        raise NotImplementedError

    def _serve(self, read_timeout_s: float, idle_timeout_s: float) -> None:
        while True:
            head = self._read_head(read_timeout_s, idle_timeout_s)
            if head is None:
                return
            with self._state_lock:
                if self._closing:
                    return
                self._busy = True
            try:
                keep_open = self._serve_frame(head)
            finally:
                with self._state_lock:
                    self._busy = False
                    closing = self._closing
            if not keep_open or closing:
                return

    def _read_head(self, read_timeout_s: float, idle_timeout_s: float) -> bytes | None:
        """The next frame's head; None when the client leaves or stays idle too long."""
        view = memoryview(self._head)
        got = 0
        idle_s = 0.0
        while got < len(view):
            try:
                n = self._sock.recv_into(view[got:])
            except BlockingIOError as exc:
                if got:
                    raise StalledPeerError(f"{self.head_name} from {self.peer} stalled") from exc
                idle_s += read_timeout_s
                if idle_s >= idle_timeout_s:
                    log.info("closing idle %s %s", self.kind, self.peer)
                    return None
                continue
            if n == 0:
                return None
            got += n
        return bytes(self._head)
