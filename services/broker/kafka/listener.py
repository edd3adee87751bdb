"""The Kafka listener of one broker: accept connections on `--kafka-listen`, one thread each,
at most `connections_max` of them (beyond that a new connection is closed at once), with the
Kaska listener's timeouts (SO_RCVTIMEO/SO_SNDTIMEO = read_timeout_s).

Lifecycle, driven by BrokerServer: `bind()` before recovery (a taken port fails fast),
`start(kctx)` once the broker's context exists (listen, accept thread), `stop_accepting()` and
then `drain(grace_s)` on shutdown: idle connections close at once, requests in flight finish
(replication stops first, which wakes produces waiting for acks), what outlives the grace
period is forced closed.

Thread-safe: `_lock` guards the connection set and the stopping flag.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading

from services.broker.kafka.connection import KafkaConnection
from services.broker.kafka.context import KafkaContext

log = logging.getLogger(__name__)

ACCEPT_ERROR_PAUSE_S = 0.1
FORCED_CLOSE_WAIT_S = 1.0


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1_000_000))


class KafkaListener:
    def __init__(self, host: str, port: int, *, connections_max: int, read_timeout_s: float,
                 request_bytes_max: int, backlog: int) -> None:
        self._host = host
        self._port = port
        self._connections_max = connections_max
        self._read_timeout_s = read_timeout_s
        self._request_bytes_max = request_bytes_max
        self._backlog = backlog
        self._lock = threading.Lock()
        self._connections_changed = threading.Condition(self._lock)
        self._connections: set[KafkaConnection] = set()
        self._stopping = False
        self._stop_requested = threading.Event()
        self._sock: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._kctx: KafkaContext | None = None
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

    def start(self, kctx: KafkaContext) -> None:
        assert self._sock is not None, "bind() first"
        self._kctx = kctx
        self._sock.listen(self._backlog)
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name="kafka-accept")
        self._accept_thread.start()

    def close_unstarted(self) -> None:
        """Release a bound socket when the broker's start failed."""
        if self._sock is not None and self._accept_thread is None:
            self._sock.close()

    # -- accepting ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, peer = self._sock.accept()
            except OSError as exc:
                if self._stopping:
                    return
                log.warning("kafka accept failed: %s", exc)
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
            log.info("dropping kafka client %s before serving it: %s", peer, exc)
            sock.close()
            return
        with self._lock:
            open_count = len(self._connections)
            admitted = not self._stopping and open_count < self._connections_max
            if admitted:
                connection = KafkaConnection(sock, peer, self._kctx, self._forget,
                                             self._request_bytes_max)
                self._connections.add(connection)
        if not admitted:
            log.warning("refusing kafka client %s: %d connections open (max %d) or stopping",
                        peer, open_count, self._connections_max)
            sock.close()
            return
        threading.Thread(target=connection.run, daemon=True, name=f"kafka-conn-{peer}").start()

    def _forget(self, connection: KafkaConnection) -> None:
        with self._lock:
            self._connections.discard(connection)
            self._connections_changed.notify_all()

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    # -- stopping ----------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        with self._lock:
            self._stopping = True
        self._stop_requested.set()
        if self._kctx is not None:
            self._kctx.groups.stop()  # joins and syncs waiting on their group answer now
        if self._sock is None:
            return
        with contextlib.suppress(OSError):  # shutdown of a listener wakes accept(); may race
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if self._accept_thread is not None:
            self._accept_thread.join()

    def interrupt_all(self) -> None:
        """Idle connections close at once, busy ones after their request."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.interrupt()

    def drain(self, grace_s: float) -> None:
        self.interrupt_all()
        if self._wait_gone(grace_s):
            return
        with self._lock:
            stuck = list(self._connections)
        log.warning("forcing %d kafka connections closed after the grace period", len(stuck))
        for connection in stuck:
            connection.force_close()
        if not self._wait_gone(FORCED_CLOSE_WAIT_S):
            log.error("%d kafka connections still running at close", self.connection_count)

    def _wait_gone(self, timeout_s: float) -> bool:
        with self._lock:
            return self._connections_changed.wait_for(lambda: not self._connections, timeout_s)
