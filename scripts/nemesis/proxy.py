"""A TCP forwarding proxy for one direction of broker-to-broker traffic (one broker's
replication client to another broker's port) that the nemesis cuts and heals.

`cut()` shuts down every connection it carries and, until `heal()`, accepts new ones only to
close them at once: the sending broker sees its peer vanish, while clients that talk to the
brokers directly are untouched. Threads: one accept loop, two pumps per connection; `cut`,
`heal` and `close` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading

CONNECT_TIMEOUT_S = 2.0
CHUNK_BYTES = 1 << 16


def _shutdown(sock: socket.socket) -> None:
    """Wake any thread blocked on `sock` (closing alone does not interrupt a recv)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Link:
    """One proxied connection; both sockets closed when both pumps are done."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self._pumps_left = 2
        self._lock = threading.Lock()

    def shutdown(self) -> None:
        _shutdown(self.client)
        _shutdown(self.upstream)

    def pump_done(self) -> bool:
        self.shutdown()
        with self._lock:
            self._pumps_left -= 1
            last = self._pumps_left == 0
        if last:
            self.client.close()
            self.upstream.close()
        return last


class PeerProxy:
    def __init__(self, upstream: tuple[str, int], name: str) -> None:
        self.upstream = upstream
        self.name = name
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._cut = False
        self.connections = 0  # forwarded connections, ever
        self.refused = 0  # connections accepted and closed at once while cut
        threading.Thread(target=self._accept_loop, daemon=True,
                         name=f"nemesis-proxy-{name}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Drop every current connection and refuse new ones."""
        with self._lock:
            self._cut = True
            links = list(self._links)
        for link in links:
            link.shutdown()

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self.cut()
        _shutdown(self._listener)
        self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                self._refuse(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=CONNECT_TIMEOUT_S)
            except OSError:  # the broker behind is down: the connecting broker sees EOF
                _shutdown(client)
                client.close()
                continue
            upstream.settimeout(None)
            link = _Link(client, upstream)
            with self._lock:
                cut = self._cut
                if not cut:
                    self._links.add(link)
                    self.connections += 1
            if cut:  # cut while we were connecting
                upstream.close()
                self._refuse(client)
                continue
            for source, sink, way in ((client, upstream, "up"), (upstream, client, "down")):
                threading.Thread(target=self._pump, args=(link, source, sink), daemon=True,
                                 name=f"nemesis-proxy-{self.name}-{way}").start()

    def _refuse(self, client: socket.socket) -> None:
        with self._lock:
            self.refused += 1
        _shutdown(client)
        client.close()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = source.recv(CHUNK_BYTES)
                if not data or self._cut:
                    break
                sink.sendall(data)
        if link.pump_done():
            with self._lock:
                self._links.discard(link)
