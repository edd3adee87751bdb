"""Heartbeats: every supervised service tells every health checker "I am alive" over TCP.

Wire format: a stream of frames on one TCP connection per health checker, each frame

    u32 big-endian length (<= FRAME_BYTES_MAX) | tag[32] | UTF-8 JSON object
    {"name": "broker-1", "instance": "host:pid:nonce", "pid": 1234, "timestamp": <wall clock s>,
     "seq": <n>, "inc": <start time, ns>, "state": "alive" | "stopping"
     [, "status": "storage full on /data"]}

    tag = HMAC-SHA256(cluster secret, "flights-heartbeat\0" | JSON)

Heartbeats are signed like the health checkers' election packets (common/cluster_secret.py has
the secret): `inc` is the sender's incarnation and `seq` its counter, so the receiver refuses a
replayed frame with `common/replay_guard.py` (per service name and instance), and `timestamp`
bounds what a receiver that just started can be fooled with. A frame that fails its HMAC is a
stranger's (`UnauthenticatedHeartbeatError`): its connection is closed.

"status" (optional, at most STATUS_CHARS_MAX characters) says why a live service is degraded,
e.g. a broker whose disk is full; it is left out while the service is healthy, so those frames
are what they always were, and receivers that do not know it ignore it (unknown keys are).

"stopping" is sent once by `HeartbeatSender.stop()` so that a service that ends on purpose (a
client that finished, a SIGTERM) is not restarted; a SIGKILLed or hung service sends nothing
and its health checkers notice the silence. The receiver's clock, not `timestamp`, decides
liveness (`timestamp` is for logs only).

`HeartbeatSender` is dependency-free and never raises into the service: one daemon thread per
target reconnects after failures with bounded timeouts and sends only the newest heartbeat (there
is no queue to grow). Thread-safety: start() and stop() from one owner thread.

Use in a service (`--healthcheckers` being the checkers' heartbeat addresses):

    targets = parse_host_ports(args.healthcheckers)  # common/address.py
    sender = HeartbeatSender("broker-1", targets=targets,
                             secret=heartbeat_secret(targets, args.secret_file)).start()
    ...
    sender.stop()  # on a deliberate shutdown: says goodbye, so nobody restarts it
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.cluster_secret import SECRET_ENV, load_secret

FRAME_BYTES_MAX = 4096
TAG_BYTES = 32
_DOMAIN = b"flights-heartbeat\0"
_U64_MAX = 2**64 - 1
NAME_CHARS_MAX = 128
STATUS_CHARS_MAX = 256
STATE_ALIVE = "alive"
STATE_STOPPING = "stopping"
_LENGTH = struct.Struct(">I")

log = logging.getLogger(__name__)


class MalformedHeartbeatError(ValueError):
    """A heartbeat frame that is too long, not JSON, or lacks a field."""


class HeartbeatConfigError(ValueError):
    """Heartbeat targets without the secret to sign the heartbeats with."""


class UnauthenticatedHeartbeatError(MalformedHeartbeatError):
    """A heartbeat frame whose HMAC does not match: a stranger's, or another secret's."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    name: str
    instance: str
    pid: int
    timestamp: float
    seq: int
    state: str = STATE_ALIVE
    status: str = ""  # why a live service is degraded; "" when healthy
    incarnation: int = 0  # the sender's start time in ns: replay protection with `seq`

    def to_json(self) -> dict:
        fields = {
            "name": self.name,
            "instance": self.instance,
            "pid": self.pid,
            "timestamp": self.timestamp,
            "seq": self.seq,
            "inc": self.incarnation,
            "state": self.state,
        }
        if self.status:
            fields["status"] = self.status
        return fields


def _tag(secret: bytes, body) -> bytes:
    return hmac.new(secret, _DOMAIN + bytes(body), hashlib.sha256).digest()


def encode_heartbeat(heartbeat: Heartbeat, secret: bytes) -> bytes:
    """The signed frame, length prefix included."""
    assert secret, "heartbeats are signed with the cluster secret"
    body = json.dumps(heartbeat.to_json(), separators=(",", ":")).encode("utf-8")
    assert TAG_BYTES + len(body) <= FRAME_BYTES_MAX, "heartbeat fields are bounded"
    return _LENGTH.pack(TAG_BYTES + len(body)) + _tag(secret, body) + body


def decode_heartbeat_frame(frame: bytes, secret: bytes) -> Heartbeat:
    """The heartbeat of one frame (after its length prefix) whose HMAC holds; raises
    `UnauthenticatedHeartbeatError` or `MalformedHeartbeatError`."""
    tag, body = frame[:TAG_BYTES], frame[TAG_BYTES:]
    if len(tag) < TAG_BYTES or not hmac.compare_digest(tag, _tag(secret, body)):
        raise UnauthenticatedHeartbeatError("the heartbeat's HMAC does not match (unsigned, "
                                            "forged, or another secret)")
    return decode_heartbeat_body(body)


def frame_length(prefix: bytes, frame_bytes_max: int = FRAME_BYTES_MAX) -> int:
    """The body length announced by a 4-byte prefix; raises when above the bound."""
    (length,) = _LENGTH.unpack(prefix)
    if length == 0 or length > frame_bytes_max:
        raise MalformedHeartbeatError(f"frame length {length} outside 1..{frame_bytes_max}")
    return length


def decode_heartbeat_body(body: bytes) -> Heartbeat:
    try:
        fields = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedHeartbeatError(f"not a JSON frame: {error}") from error
    if not isinstance(fields, dict):
        raise MalformedHeartbeatError("frame is not a JSON object")
    name, instance, state = fields.get("name"), fields.get("instance"), fields.get("state")
    pid, timestamp, seq = fields.get("pid"), fields.get("timestamp"), fields.get("seq")
    incarnation = fields.get("inc", 0)
    if not (isinstance(name, str) and 0 < len(name) <= NAME_CHARS_MAX):
        raise MalformedHeartbeatError(f"bad name {name!r}")
    if not (isinstance(instance, str) and len(instance) <= NAME_CHARS_MAX):
        raise MalformedHeartbeatError(f"bad instance {instance!r}")
    if state not in (STATE_ALIVE, STATE_STOPPING):
        raise MalformedHeartbeatError(f"bad state {state!r}")
    if not (isinstance(pid, int) and isinstance(seq, int) and isinstance(timestamp, int | float)):
        raise MalformedHeartbeatError("pid, seq and timestamp must be numbers")
    if not (_is_int(incarnation) and 0 <= incarnation <= _U64_MAX and _is_int(seq)
            and 0 <= seq <= _U64_MAX and math.isfinite(timestamp) and timestamp >= 0):
        raise MalformedHeartbeatError(f"inc, seq or timestamp out of range: {incarnation!r:.30}, "
                                      f"{seq!r:.30}, {timestamp!r:.30}")
    status = fields.get("status", "")
    if not (isinstance(status, str) and len(status) <= STATUS_CHARS_MAX):
        raise MalformedHeartbeatError(f"bad status {status!r:.80}")
    return Heartbeat(name, instance, pid, float(timestamp), seq, state, status, incarnation)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def heartbeat_secret(targets: Sequence, secret_file: Path | None) -> bytes | None:
    """What heartbeats to `targets` are signed with: the cluster secret (`--secret-file`, else
    $FLIGHTS_CLUSTER_SECRET); None without targets. Raises ClusterSecretError (unreadable) or
    HeartbeatConfigError (targets but no secret)."""
    if not targets:
        return None
    secret = load_secret(secret_file)
    if secret is None:
        raise HeartbeatConfigError("--heartbeat-targets needs the cluster secret to sign the "
                                   f"heartbeats: give --secret-file or ${SECRET_ENV}")
    return secret


class _TargetLink:
    """One reconnecting TCP connection to one health checker (used by one thread only)."""

    def __init__(self, target: tuple[str, int], connect_timeout_s: float, send_timeout_s: float):
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.send_timeout_s = send_timeout_s
        self._sock: socket.socket | None = None
        self.failures = 0

    def send(self, frame: bytes) -> bool:
        try:
            if self._sock is None:
                self._sock = socket.create_connection(self.target, timeout=self.connect_timeout_s)
                self._sock.settimeout(self.send_timeout_s)
            self._sock.sendall(frame)
        except OSError as error:
            # Down or restarting health checkers are normal; retry on the next beat.
            self.failures += 1
            if self.failures == 1 or self.failures % 60 == 0:
                log.debug("heartbeat to %s:%s failed (%s)", *self.target, error)
            self.close()
            return False
        self.failures = 0
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class HeartbeatSender:
    """Sends `{name, instance, pid, timestamp}` to every target every `interval_s`, signed with
    `secret` (module doc)."""

    def __init__(
        self,
        name: str,
        instance: str | None = None,
        targets: Sequence[tuple[str, int]] = (),
        *,
        secret: bytes | None = None,
        interval_s: float = 1.0,
        connect_timeout_s: float = 0.5,
        send_timeout_s: float = 0.5,
        status: Callable[[], str] | None = None,
    ) -> None:
        """`status()`: asked before every beat; "" when healthy (see the module doc)."""
        assert 0 < len(name) <= NAME_CHARS_MAX
        assert interval_s > 0 and connect_timeout_s > 0 and send_timeout_s > 0
        if targets and not secret:
            raise HeartbeatConfigError("heartbeats are signed with the cluster secret: give "
                                       f"--secret-file or ${SECRET_ENV}")
        self.name = name
        self._secret = secret
        self.incarnation = time.time_ns()
        self.pid = os.getpid()
        # host:pid:nonce -- a container started again often has the same hostname and pid
        # (pid 7 in every run of the image): the nonce tells the new process from the dead one.
        self.instance = instance or f"{socket.gethostname()}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.targets = [tuple(target) for target in targets]
        self.interval_s = interval_s
        self._status = status
        self._connect_timeout_s = min(connect_timeout_s, interval_s)
        self._send_timeout_s = min(send_timeout_s, interval_s)
        self._stop = threading.Event()
        self._say_goodbye = True
        self._threads: list[threading.Thread] = []
        self._seq = 0
        self._seq_lock = threading.Lock()
        self.sent = 0

    def start(self) -> HeartbeatSender:
        assert not self._threads, "start() once"
        for target in self.targets:
            thread = threading.Thread(
                target=self._run, args=(target,), name=f"heartbeat->{target[0]}:{target[1]}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, say_goodbye: bool = True, join_timeout_s: float = 1.0) -> None:
        """Stop beating; with `say_goodbye`, tell the checkers this stop is deliberate."""
        self._say_goodbye = say_goodbye
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=join_timeout_s)

    def __enter__(self) -> HeartbeatSender:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _next_frame(self, state: str) -> bytes:
        with self._seq_lock:
            self._seq += 1
            seq = self._seq
        status = self._status() if self._status is not None else ""
        heartbeat = Heartbeat(self.name, self.instance, self.pid, time.time(), seq, state,
                              status[:STATUS_CHARS_MAX], self.incarnation)
        return encode_heartbeat(heartbeat, self._secret)

    def _run(self, target: tuple[str, int]) -> None:
        link = _TargetLink(target, self._connect_timeout_s, self._send_timeout_s)
        try:
            while not self._stop.is_set():
                if link.send(self._next_frame(STATE_ALIVE)):
                    with self._seq_lock:
                        self.sent += 1
                self._stop.wait(self.interval_s)
            if self._say_goodbye:
                link.send(self._next_frame(STATE_STOPPING))
        finally:
            link.close()
