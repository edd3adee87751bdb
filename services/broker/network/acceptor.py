"""One listening socket and the connections it admits, one thread each: the broker has Kaska's
(server.py) and one per named Kafka listener (kafka/listener.py), which differ only in the
connection they serve.

Bounds: at most `connections_max` connections (beyond that a new one is closed at once, and
counted in `refusals` by reason: `full`, or `stopping` for one that arrived during shutdown);
SO_RCVTIMEO/SO_SNDTIMEO = `read_timeout_s` on each, so a stalled peer cannot hold a thread
forever; an accept error (e.g. EMFILE) pauses `ACCEPT_ERROR_PAUSE_S` instead of spinning.

Lifecycle: `bind()` (a taken port fails fast, before the broker recovers its log), `listen()`
(optional: connections queue in the backlog from then on), `start(make)` (the accept thread),
then on shutdown `stop_accepting()`, `interrupt_all()` (idle connections close at once, busy
ones after their request) and `finish(grace_s)` (wait for them; force-close what outlives the
grace period). `close_unstarted()` releases a socket bound by a start that failed.

Thread-safe: `_lock` guards the connection set, the refusal counts and the stopping flag.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

ACCEPT_ERROR_PAUSE_S = 0.1
REFUSAL_REASONS = ("full", "stopping")
FORCED_CLOSE_WAIT_S = 1.0


class ServedConnection(Protocol):
    def run(self) -> None: ...  # serves until the peer leaves; then calls its `forget`
    def interrupt(self) -> None: ...  # close when idle, or after the request in flight
    def force_close(self) -> None: ...


# (socket, "host:port" of the peer, forget) -> the connection; it calls forget(itself) at its end
MakeConnection = Callable[[socket.socket, str, Callable[[ServedConnection], None]],
                          ServedConnection]


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1_000_000))


class Acceptor:
    def __init__(self, host: str, port: int, *, name: str, connections_max: int,
                 read_timeout_s: float, backlog: int,
                 accept_thread_name: str | None = None) -> None:
        """`name`: what the log lines, thread names and metrics call these connections
        ("kaska"); `accept_thread_name`: the accepting thread's (default `<name>-accept`)."""
        self._host = host
        self._port = port
        self._name = name
        self._accept_thread_name = accept_thread_name or f"{name}-accept"
        self._connections_max = connections_max
        self._read_timeout_s = read_timeout_s
        self._backlog = backlog
        self._lock = threading.Lock()
        self._connections_changed = threading.Condition(self._lock)
        self._connections: set[ServedConnection] = set()
        self._refusals = dict.fromkeys(REFUSAL_REASONS, 0)
        self._stopping = False
        self._stop_requested = threading.Event()
        self._sock: socket.socket | None = None
        self._listening = False
        self._accept_thread: threading.Thread | None = None
        self._make: MakeConnection | None = None
        self.address: tuple[str, int] | None = None

    def bind(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.address = sock.getsockname()[:2]

    def listen(self) -> None:
        """Queue connections (up to the backlog) before `start` serves them."""
        assert self._sock is not None, "bind() first"
        if not self._listening:
            self._sock.listen(self._backlog)
            self._listening = True

    def start(self, make: MakeConnection) -> None:
        self.listen()
        self._make = make
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name=self._accept_thread_name)
        self._accept_thread.start()

    def close_unstarted(self) -> None:
        if self._sock is not None and self._accept_thread is None:
            self._sock.close()

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    @property
    def name(self) -> str:
        return self._name

    def refusals(self) -> dict[str, int]:
        """Connections closed unserved since the start, by reason (REFUSAL_REASONS)."""
        with self._lock:
            return dict(self._refusals)

    # -- accepting ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, peer = self._sock.accept()
            except OSError as exc:
                if self._stopping:
                    return
                log.warning("%s accept failed: %s", self._name, exc)
                self._stop_requested.wait(ACCEPT_ERROR_PAUSE_S)
                continue
            self._admit(sock, f"{peer[0]}:{peer[1]}")

    def _admit(self, sock: socket.socket, peer: str) -> None:
        try:
            timeout = _timeval(self._read_timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeout)
        except OSError as exc:  # the client is already gone
            log.info("dropping %s client %s before serving it: %s", self._name, peer, exc)
            sock.close()
            return
        with self._lock:
            open_count = len(self._connections)
            refusal = "stopping" if self._stopping else \
                "full" if open_count >= self._connections_max else None
            if refusal is None:
                connection = self._make(sock, peer, self._forget)
                self._connections.add(connection)
            else:
                self._refusals[refusal] += 1
        if refusal is not None:
            log.warning("refusing %s client %s (%s): %d connections open (max %d)",
                        self._name, peer, refusal, open_count, self._connections_max)
            sock.close()
            return
        threading.Thread(target=connection.run, daemon=True,
                         name=f"{self._name}-conn-{peer}").start()

    def _forget(self, connection: ServedConnection) -> None:
        with self._lock:
            self._connections.discard(connection)
            self._connections_changed.notify_all()

    # -- stopping ----------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        with self._lock:
            self._stopping = True
        self._stop_requested.set()
        if self._sock is None:
            return
        with contextlib.suppress(OSError):  # shutdown of a listener wakes accept(); may race
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if self._accept_thread is not None:
            self._accept_thread.join()

    def interrupt_all(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.interrupt()

    def finish(self, grace_s: float) -> None:
        """After `interrupt_all()`: wait up to `grace_s` for the connections to end, then
        force the rest closed."""
        if self._wait_gone(grace_s):
            return
        with self._lock:
            stuck = list(self._connections)
        log.warning("forcing %d %s connections closed after the grace period", len(stuck),
                    self._name)
        for connection in stuck:
            connection.force_close()
        if not self._wait_gone(FORCED_CLOSE_WAIT_S):
            log.error("%d %s connections still running at close", self.connection_count,
                      self._name)

    def _wait_gone(self, timeout_s: float) -> bool:
        with self._lock:
            return self._connections_changed.wait_for(lambda: not self._connections, timeout_s)
