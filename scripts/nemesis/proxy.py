"""A TCP forwarding proxy for one direction of broker-to-broker traffic (from one broker's
replication client to another broker's port), which the nemesis and the replication tests cut
and heal.

`cut()` shuts down every connection it carries and, until `heal()`, accepts new ones only to
close them at once: the sending broker sees its peer vanish, while clients that talk to the
brokers directly are untouched. `throttle(bytes_per_s)` slows each direction of every
connection to that rate (None: full speed again), so a catch-up lasts long enough, on any
machine, for a fault to land in the middle of it. `requests_seen()` holds the first
`RECORD_BYTES_MAX` bytes sent upstream on each connection (the frames a test replays to show
they are refused). Threads: one accept loop, two pumps per connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

RECORD_BYTES_MAX = 1 << 20


def _shutdown(sock: socket.socket) -> None:
    """Wake any thread blocked on `sock` (recv returns b"", sendall fails); closing alone
    would not interrupt a recv in another thread."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Link:
    """One proxied connection: client side, upstream side, closed when both pumps are done."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self._pumps_left = 2
        self._lock = threading.Lock()

    def shutdown(self) -> None:
        _shutdown(self.client)
        _shutdown(self.upstream)

    def pump_done(self) -> bool:
        """Shut both sides; True (and both closed) for the second pump to finish."""
        self.shutdown()
        with self._lock:
            self._pumps_left -= 1
            last = self._pumps_left == 0
        if last:
            self.client.close()
            self.upstream.close()
        return last


class PeerProxy:
    def __init__(self, upstream: tuple[str, int], name: str = "") -> None:
        self.upstream = upstream
        self.name = name or f"proxy->{upstream[1]}"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._cut = False
        self._closed = False
        self.connections = 0  # forwarded connections, ever
        self.refused = 0  # connections accepted and closed at once while cut
        self.bytes_forwarded = 0
        self.bytes_per_s_max: float | None = None
        self._recorded: list[bytearray] = []  # per connection: the bytes sent upstream
        threading.Thread(target=self._accept_loop, daemon=True,
                         name=f"peer-proxy-{self.name}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def requests_seen(self) -> list[bytes]:
        """What each connection so far sent upstream (its first RECORD_BYTES_MAX bytes)."""
        with self._lock:
            return [bytes(stream) for stream in self._recorded]

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Drop every current connection and refuse new ones (accept, close at once)."""
        with self._lock:
            self._cut = True
            links = list(self._links)
        for link in links:
            link.shutdown()

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def throttle(self, bytes_per_s_max: float | None) -> None:
        """Forward at most this many bytes a second per direction and connection (None: no
        limit); takes effect from the next chunk."""
        assert bytes_per_s_max is None or bytes_per_s_max > 0
        self.bytes_per_s_max = bytes_per_s_max

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cut = True
            links = list(self._links)
        _shutdown(self._listener)  # wakes the accept loop
        self._listener.close()
        for link in links:
            link.shutdown()

    # -- threads -----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._cut
                if refuse:
                    self.refused += 1
            if refuse:
                _shutdown(client)
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=2.0)
            except OSError:  # the broker behind is down: the connecting broker sees EOF
                _shutdown(client)
                client.close()
                continue
            upstream.settimeout(None)
            link = _Link(client, upstream)
            with self._lock:
                if self._cut:  # cut while we were connecting
                    self.refused += 1
                    link.shutdown()
                    client.close()
                    upstream.close()
                    continue
                self._links.add(link)
                self.connections += 1
            record = bytearray()
            with self._lock:
                self._recorded.append(record)
            threading.Thread(target=self._pump, args=(link, client, upstream, record),
                             daemon=True,
                             name=f"peer-proxy-{self.name}-up").start()
            threading.Thread(target=self._pump, args=(link, upstream, client), daemon=True,
                             name=f"peer-proxy-{self.name}-down").start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket,
              record: bytearray | None = None) -> None:
        with contextlib.suppress(OSError):
            while True:
                rate = self.bytes_per_s_max
                # Throttled: small chunks, each followed by its share of a second.
                data = source.recv(1 << 16 if rate is None else max(1, int(rate // 20)))
                if not data or self._cut:
                    break
                sink.sendall(data)
                if rate is not None:
                    time.sleep(len(data) / rate)
                with self._lock:
                    self.bytes_forwarded += len(data)
                    if record is not None and len(record) < RECORD_BYTES_MAX:
                        record += data[:RECORD_BYTES_MAX - len(record)]
        if link.pump_done():
            with self._lock:
                self._links.discard(link)
