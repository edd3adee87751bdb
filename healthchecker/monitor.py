"""What a health checker knows about liveness: heartbeats received over TCP, and probes.

- `LivenessTable`: last time each service was seen, by name. Thread-safe (one lock); readers get
  immutable `Sighting` snapshots. Every sighting, goodbye and loss is also handed, as a
  `healthchecker.supervision` event (`Seen`, `Departed`, `Lost`), to the optional `listener`
  (called outside the lock, from the server's or the probes' thread).
- `HeartbeatServer`: a TCP server (one selector thread) reading `common.heartbeat` frames,
  signed with the cluster secret. Bounded: at most `connections_max` connections (extra ones
  are closed at once), frames of at most `frame_bytes_max`, and a connection silent for
  `idle_timeout_s` is closed. A malformed, oversized or unsigned/forged frame closes its
  connection (a forged one is logged once per remote host); a replayed or stale one is dropped
  and the connection kept (a checker resumed after a pause finds old frames in its buffers);
  all of these are counted in `counters`. A connection
  that the *peer* closes (EOF or reset) after heartbeats but without a goodbye means the process
  is gone (the kernel closes the sockets of a killed process): the table records a loss.
- `ProbeRunner`: third-party services that cannot send heartbeats (Spark master and workers) are
  "seen" whenever a TCP connect to their port succeeds, or (`http://` probes) whenever an HTTP
  GET is answered in time, which a paused (SIGSTOPped) process cannot do: the kernel completes
  its TCP handshakes all the same. `PROBE_REFUSALS_MAX` refused connects in a row to a service
  seen before record a loss (nothing listens any more).
"""

from __future__ import annotations

import functools
import http.client
import logging
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from common.address import parse_host_port
from common.heartbeat import (
    FRAME_BYTES_MAX,
    STATE_STOPPING,
    Heartbeat,
    MalformedHeartbeatError,
    UnauthenticatedHeartbeatError,
    decode_heartbeat_frame,
    frame_length,
)
from common.periodic import PeriodicThread
from common.replay_guard import ReplayGuard, is_stale
from healthchecker.errors import HealthCheckerConfigError, require_positive_s
from healthchecker.supervision import Departed, Event, Lost, Seen

SOURCE_HEARTBEAT = "heartbeat"
SOURCE_PROBE = "probe"
CONNECTIONS_MAX_DEFAULT = 256
IDLE_TIMEOUT_S_DEFAULT = 60.0
SERVICES_MAX = 1024
PROBES_MAX = 64
PROBE_REFUSALS_MAX = 2
HTTP_PATH_CHARS_MAX = 256
_READ_BYTES = 4096
_LENGTH_BYTES = 4

log = logging.getLogger(__name__)
Clock = Callable[[], float]
Listener = Callable[[Event], None]


class ProbeConfigError(HealthCheckerConfigError):
    """A probe that does not parse, or too many of them."""


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

    def __init__(
        self,
        clock: Clock = time.monotonic,
        services_max: int = SERVICES_MAX,
        listener: Listener | None = None,
    ) -> None:
        self._clock = clock
        self._services_max = services_max
        self._listener = listener
        self._lock = threading.Lock()
        self._sightings: dict[str, Sighting] = {}

    def _notify(self, event: Event) -> None:
        if self._listener is not None:
            self._listener(event)

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
        kind = Departed if departed else Seen
        self._notify(kind(heartbeat.name, heartbeat.instance))

    def record_connection_lost(self, name: str, instance: str) -> None:
        """The connection that carried `instance`'s heartbeats closed without a goodbye."""
        with self._lock:
            current = self._sightings.get(name)
            if current is None or current.departed or current.instance != instance:
                return  # an older instance, or one that said goodbye
        log.info("LOST service=%s instance=%s (connection closed without a goodbye)",
                 name, instance)
        self._notify(Lost(name, instance))

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
            if previous.last_seen_at is None:
                log.info("SEEN service=%s probe answered", name)
            self._sightings[name] = replace(previous, last_seen_at=now)
        self._notify(Seen(name))

    def record_probe_refused(self, name: str, refusals: int) -> None:
        with self._lock:
            current = self._sightings.get(name)
            if current is None or current.last_seen_at is None:
                return  # never seen: it may still be starting
        reason = f"probe refused {refusals} times in a row (nothing listens)"
        log.info("LOST service=%s %s", name, reason)
        self._notify(Lost(name, "", reason))

    def snapshot(self) -> dict[str, Sighting]:
        with self._lock:
            return dict(self._sightings)


class _Connection:
    __slots__ = ("sock", "origin", "buffer", "last_read_at", "name", "instance", "said_goodbye")

    def __init__(self, sock: socket.socket, now: float, origin: str = "") -> None:
        self.sock = sock
        self.origin = origin  # the remote host, for logging a stranger once
        self.buffer = bytearray()
        self.last_read_at = now
        self.name = ""  # of the last heartbeat on this connection
        self.instance = ""
        self.said_goodbye = False


class HeartbeatServer:
    """Receives heartbeat frames into a `LivenessTable` (bounds: module doc)."""

    def __init__(
        self,
        listen: tuple[str, int],
        table: LivenessTable,
        *,
        secret: bytes,
        connections_max: int = CONNECTIONS_MAX_DEFAULT,
        frame_bytes_max: int = FRAME_BYTES_MAX,
        idle_timeout_s: float = IDLE_TIMEOUT_S_DEFAULT,
        poll_interval_s: float = 0.2,
    ) -> None:
        if not secret:
            raise HealthCheckerConfigError("heartbeats are checked with the cluster secret; "
                                           "an empty one authenticates nothing")
        self.table = table
        self._secret = secret
        self._guard = ReplayGuard()
        self._strangers_logged: set[str] = set()
        self.connections_max = connections_max
        self.frame_bytes_max = frame_bytes_max
        self.idle_timeout_s = idle_timeout_s
        self.poll_interval_s = poll_interval_s
        self.counters: Counter[str] = Counter()
        for field, value in (("idle_timeout_s", idle_timeout_s),
                             ("poll_interval_s", poll_interval_s)):
            require_positive_s(HealthCheckerConfigError, field, value)
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
            sock, address = self._listener.accept()
        except BlockingIOError:
            return
        if len(self._connections) >= self.connections_max:
            self.counters["rejected_connections"] += 1
            sock.close()
            return
        sock.setblocking(False)
        connection = _Connection(sock, time.monotonic(), str(address[0]))
        self._connections[sock.fileno()] = connection
        self._selector.register(sock, selectors.EVENT_READ)
        self.counters["accepted_connections"] += 1

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(_READ_BYTES)
        except BlockingIOError:
            return
        except OSError:  # reset by the peer
            self._closed_by_peer(connection)
            return
        if not data:
            self._closed_by_peer(connection)
            return
        connection.last_read_at = time.monotonic()
        connection.buffer += data
        try:
            self._consume_frames(connection)
        except UnauthenticatedHeartbeatError as error:
            self.counters["unauthenticated_frames"] += 1
            self._log_stranger(connection, error)
            self._close(connection)
        except MalformedHeartbeatError as error:
            self.counters["malformed_frames"] += 1
            log.warning("closing heartbeat connection: %s", error)
            self._close(connection)

    def _log_stranger(self, connection: _Connection, error: Exception) -> None:
        first = connection.origin not in self._strangers_logged and \
            len(self._strangers_logged) < SERVICES_MAX
        if first:
            self._strangers_logged.add(connection.origin)
        log.log(logging.WARNING if first else logging.DEBUG,
                "closing heartbeat connection from %s: %s%s", connection.origin, error,
                " (further ones from it are counted, logged at DEBUG)" if first else "")

    def _consume_frames(self, connection: _Connection) -> None:
        buffer = connection.buffer
        while len(buffer) >= _LENGTH_BYTES:
            length = frame_length(bytes(buffer[:_LENGTH_BYTES]), self.frame_bytes_max)
            if len(buffer) < _LENGTH_BYTES + length:
                return
            body = bytes(buffer[_LENGTH_BYTES : _LENGTH_BYTES + length])
            del buffer[: _LENGTH_BYTES + length]
            heartbeat = decode_heartbeat_frame(body, self._secret)
            if not self._fresh(heartbeat):
                continue
            connection.name, connection.instance = heartbeat.name, heartbeat.instance
            connection.said_goodbye = heartbeat.state == STATE_STOPPING
            self.table.record_heartbeat(heartbeat)
            self.counters["frames"] += 1

    def _fresh(self, heartbeat: Heartbeat) -> bool:
        """False (counted) for a replayed heartbeat or one stamped too far from our clock."""
        if is_stale(round(heartbeat.timestamp * 1000), time.time()):
            self.counters["stale_frames"] += 1
            return False
        if not self._guard.admit((heartbeat.name, heartbeat.instance), heartbeat.incarnation,
                                 heartbeat.seq, time.monotonic()):
            self.counters["replayed_frames"] += 1
            log.debug("dropped a replayed heartbeat of %s (seq %d)", heartbeat.name,
                      heartbeat.seq)
            return False
        return True

    def _closed_by_peer(self, connection: _Connection) -> None:
        self._close(connection)
        if connection.name and not connection.said_goodbye:
            self.counters["lost_connections"] += 1
            self.table.record_connection_lost(connection.name, connection.instance)

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
    http_path: str | None = None  # None: a TCP connect; else an HTTP GET of this path


def parse_probe(text: str) -> Probe:
    """'spark-master=host:7077' -> a TCP probe; 'spark-master=http://host:8080/' -> HTTP GET."""
    name, sep, address = text.partition("=")
    path = None
    if address.startswith("http://"):
        address, slash, rest = address[len("http://"):].partition("/")
        path = slash + rest or "/"
    try:
        host, port = parse_host_port(address)
    except ValueError:
        host, port = "", -1
    if not (sep and name and host and 0 < port < 65536):
        raise ProbeConfigError(
            f"expected NAME=HOST:PORT or NAME=http://HOST:PORT/PATH, got {text!r}")
    if path is not None and (len(path) > HTTP_PATH_CHARS_MAX or not path.isprintable()
                             or " " in path):
        raise ProbeConfigError(f"bad HTTP path in probe {text!r}")
    return Probe(name, host, port, path)


class ProbeRunner:
    """Probes every target each `interval_s`; a success counts as a sighting (module doc).

    One thread per probe: an HTTP probe of a paused daemon waits out `answer_timeout_s`, and
    that wait must not delay the sightings of the others past their heartbeat timeout."""

    def __init__(
        self,
        probes: Iterable[Probe],
        table: LivenessTable,
        interval_s: float = 1.0,
        connect_timeout_s: float = 0.5,
        answer_timeout_s: float = 1.5,
    ) -> None:
        self.probes = list(probes)
        if len(self.probes) > PROBES_MAX:
            raise ProbeConfigError(f"at most {PROBES_MAX} probes, got {len(self.probes)}")
        require_positive_s(ProbeConfigError, "probe interval_s", interval_s)
        require_positive_s(ProbeConfigError, "probe connect_timeout_s", connect_timeout_s)
        require_positive_s(ProbeConfigError, "probe answer_timeout_s", answer_timeout_s)
        self.table = table
        self.interval_s = interval_s
        self.connect_timeout_s = min(connect_timeout_s, interval_s)
        self.answer_timeout_s = answer_timeout_s
        self._refusals: Counter[str] = Counter()
        self._refusals_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [PeriodicThread(f"probe-{probe.name}", interval_s,
                                        functools.partial(self.probe_one, probe),
                                        stop=self._stop, tick_at_start=True)
                         for probe in self.probes]
        for probe in self.probes:
            table.expect_probe(probe.name)

    def start(self) -> ProbeRunner:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(join_timeout_s)

    def probe_once(self) -> None:
        for probe in self.probes:
            self.probe_one(probe)

    def probe_one(self, probe: Probe) -> None:
        try:
            self._probe(probe)
        except ConnectionRefusedError as error:
            log.debug("probe %s refused: %s", probe.name, error)
            with self._refusals_lock:
                self._refusals[probe.name] += 1
                refusals = self._refusals[probe.name]
            if refusals == PROBE_REFUSALS_MAX:
                self.table.record_probe_refused(probe.name, PROBE_REFUSALS_MAX)
            return
        except OSError as error:
            log.debug("probe %s failed: %s", probe.name, error)
            return
        with self._refusals_lock:
            self._refusals[probe.name] = 0
        self.table.record_probe_success(probe.name)

    def _probe(self, probe: Probe) -> None:
        """Returns when the target answered; raises OSError otherwise."""
        if probe.http_path is None:
            socket.create_connection((probe.host, probe.port), self.connect_timeout_s).close()
            return
        # Any HTTP status counts: the daemon's threads ran to answer, which a paused one cannot.
        connection = http.client.HTTPConnection(probe.host, probe.port,
                                                timeout=self.answer_timeout_s)
        try:
            connection.request("GET", probe.http_path)
            connection.getresponse().close()
        except http.client.HTTPException as error:
            raise OSError(f"no HTTP answer from {probe.host}:{probe.port}: {error!r}") from error
        finally:
            connection.close()
