"""What a health checker knows about liveness: heartbeats received over TCP, and TCP probes.

- `LivenessTable`: last time each service was seen, by name. Thread-safe (one lock); readers get
  immutable `Sighting` snapshots.
- `HeartbeatServer`: a TCP server (one selector thread) reading `common.heartbeat` frames.
  Bounded: at most `connections_max` connections (extra ones are closed at once), frames of at
  most `frame_bytes_max`, and a connection silent for `idle_timeout_s` is closed. A malformed or
  oversized frame closes its connection; all of these are counted in `counters`.
- `ProbeRunner`: third-party services that cannot send heartbeats (Spark master and workers) are
  "seen" whenever a TCP connect to their port succeeds.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from common.heartbeat import (
    FRAME_BYTES_MAX,
    STATE_STOPPING,
    Heartbeat,
    MalformedHeartbeatError,
    decode_heartbeat_body,
    frame_length,
)

SOURCE_HEARTBEAT = "heartbeat"
SOURCE_PROBE = "probe"
CONNECTIONS_MAX_DEFAULT = 256
IDLE_TIMEOUT_S_DEFAULT = 60.0
SERVICES_MAX = 1024
PROBES_MAX = 64
_READ_BYTES = 4096
_LENGTH_BYTES = 4

log = logging.getLogger(__name__)
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Sighting:
    name: str
    source: str  # SOURCE_HEARTBEAT or SOURCE_PROBE
    first_known_at: float
    last_seen_at: float | None  # None: known (a probe target) but never seen alive
    instance: str = ""
    pid: int = 0
    departed: bool = False  # said "stopping": gone on purpose, not to be restarted


class LivenessTable:
    """Last sighting per service name (thread-safe; bounded to `services_max` names)."""

    def __init__(self, clock: Clock = time.monotonic, services_max: int = SERVICES_MAX) -> None:
        self._clock = clock
        self._services_max = services_max
        self._lock = threading.Lock()
        self._sightings: dict[str, Sighting] = {}

    def record_heartbeat(self, heartbeat: Heartbeat) -> None:
        now = self._clock()
        departed = heartbeat.state == STATE_STOPPING
        with self._lock:
            previous = self._sightings.get(heartbeat.name)
            if previous is None and len(self._sightings) >= self._services_max:
                log.warning("liveness table full; ignoring new service %s", heartbeat.name)
                return
            first_known_at = now if previous is None else previous.first_known_at
            if previous is None or previous.instance != heartbeat.instance:
                log.info("SEEN service=%s instance=%s", heartbeat.name, heartbeat.instance)
            if departed and (previous is None or not previous.departed):
                log.info("DEPARTED service=%s instance=%s", heartbeat.name, heartbeat.instance)
            self._sightings[heartbeat.name] = Sighting(
                heartbeat.name, SOURCE_HEARTBEAT, first_known_at, now,
                heartbeat.instance, heartbeat.pid, departed,
            )

    def expect_probe(self, name: str) -> None:
        with self._lock:
            if name not in self._sightings:
                self._sightings[name] = Sighting(name, SOURCE_PROBE, self._clock(), None)

    def record_probe_success(self, name: str) -> None:
        with self._lock:
            previous = self._sightings.get(name)
            now = self._clock()
            if previous is None:
                previous = Sighting(name, SOURCE_PROBE, now, None)
            self._sightings[name] = replace(previous, last_seen_at=now)

    def snapshot(self) -> dict[str, Sighting]:
        with self._lock:
            return dict(self._sightings)


class _Connection:
    __slots__ = ("sock", "buffer", "last_read_at")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.last_read_at = now


class HeartbeatServer:
    """Receives heartbeat frames into a `LivenessTable` (bounds: module doc)."""

    def __init__(
        self,
        listen: tuple[str, int],
        table: LivenessTable,
        connections_max: int = CONNECTIONS_MAX_DEFAULT,
        frame_bytes_max: int = FRAME_BYTES_MAX,
        idle_timeout_s: float = IDLE_TIMEOUT_S_DEFAULT,
        poll_interval_s: float = 0.2,
    ) -> None:
        self.table = table
        self.connections_max = connections_max
        self.frame_bytes_max = frame_bytes_max
        self.idle_timeout_s = idle_timeout_s
        self.poll_interval_s = poll_interval_s
        self.counters: Counter[str] = Counter()
        self._listener = socket.create_server(listen, reuse_port=False, backlog=64)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._connections: dict[int, _Connection] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="heartbeat-server", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self._listener.getsockname()[:2]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def start(self) -> HeartbeatServer:
        self._thread.start()
        return self

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout=join_timeout_s)

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                for key, _events in self._selector.select(timeout=self.poll_interval_s):
                    if key.fileobj is self._listener:
                        self._accept()
                    else:
                        self._read(self._connections[key.fileobj.fileno()])
                self._close_idle()
        finally:
            for connection in list(self._connections.values()):
                self._close(connection)
            self._selector.close()
            self._listener.close()

    def _accept(self) -> None:
        try:
            sock, _address = self._listener.accept()
        except BlockingIOError:
            return
        if len(self._connections) >= self.connections_max:
            self.counters["rejected_connections"] += 1
            sock.close()
            return
        sock.setblocking(False)
        connection = _Connection(sock, time.monotonic())
        self._connections[sock.fileno()] = connection
        self._selector.register(sock, selectors.EVENT_READ)
        self.counters["accepted_connections"] += 1

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(_READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            self._close(connection)
            return
        if not data:
            self._close(connection)
            return
        connection.last_read_at = time.monotonic()
        connection.buffer += data
        try:
            self._consume_frames(connection)
        except MalformedHeartbeatError as error:
            self.counters["malformed_frames"] += 1
            log.warning("closing heartbeat connection: %s", error)
            self._close(connection)

    def _consume_frames(self, connection: _Connection) -> None:
        buffer = connection.buffer
        while len(buffer) >= _LENGTH_BYTES:
            length = frame_length(bytes(buffer[:_LENGTH_BYTES]), self.frame_bytes_max)
            if len(buffer) < _LENGTH_BYTES + length:
                return
            body = bytes(buffer[_LENGTH_BYTES : _LENGTH_BYTES + length])
            del buffer[: _LENGTH_BYTES + length]
            self.table.record_heartbeat(decode_heartbeat_body(body))
            self.counters["frames"] += 1

    def _close_idle(self) -> None:
        oldest_allowed = time.monotonic() - self.idle_timeout_s
        for connection in list(self._connections.values()):
            if connection.last_read_at < oldest_allowed:
                self.counters["idle_closed"] += 1
                self._close(connection)

    def _close(self, connection: _Connection) -> None:
        self._connections.pop(connection.sock.fileno(), None)
        self._selector.unregister(connection.sock)
        connection.sock.close()


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    host: str
    port: int


def parse_probe(text: str) -> Probe:
    """'spark-master=host:7077' -> Probe."""
    name, sep, address = text.partition("=")
    host, colon, port = address.rpartition(":")
    if not (sep and name and colon and host and port.isdigit()):
        raise ValueError(f"expected NAME=HOST:PORT, got {text!r}")
    return Probe(name, host, int(port))


class ProbeRunner:
    """Connects to every probe target each `interval_s`; a success counts as a sighting."""

    def __init__(
        self,
        probes: Iterable[Probe],
        table: LivenessTable,
        interval_s: float = 1.0,
        connect_timeout_s: float = 0.5,
    ) -> None:
        self.probes = list(probes)
        assert len(self.probes) <= PROBES_MAX, f"at most {PROBES_MAX} probes"
        self.table = table
        self.interval_s = interval_s
        self.connect_timeout_s = min(connect_timeout_s, interval_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-probes", daemon=True)
        for probe in self.probes:
            table.expect_probe(probe.name)

    def start(self) -> ProbeRunner:
        if self.probes:
            self._thread.start()
        return self

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=join_timeout_s)

    def probe_once(self) -> None:
        for probe in self.probes:
            try:
                with socket.create_connection((probe.host, probe.port), self.connect_timeout_s):
                    self.table.record_probe_success(probe.name)
            except OSError as error:
                log.debug("probe %s failed: %s", probe.name, error)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probe_once()
            self._stop.wait(self.interval_s)
