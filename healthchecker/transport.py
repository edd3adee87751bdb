"""Election and state packets over UDP, authenticated with HMAC-SHA256 and replay-protected.

Packet format (at most `PACKET_BYTES_MAX` bytes):

    32 bytes  HMAC-SHA256(secret, body)
    ...       body: UTF-8 JSON
              {"v": 2, "kind": "ELECTION", "from": 2, "to": 3, "inc": <u64>, "ctr": <u63>,
               "ts": <sender's wall clock, ms>, "leader": null}
              a "STATE" packet carries "services": [[...], ...] (healthchecker.supervision)

`inc` is the sender's incarnation (its start time in nanoseconds: a restarted sender has a larger
one), `ctr` a counter the sender increments for every packet and `ts` its wall clock; all are
inside the HMAC. Replays are refused by `common/replay_guard.py` (shared with the brokers' peer
frames and the heartbeats): a 64-packet window of counters per sender and incarnation, and a
packet more than `packet_age_s_max` away from the receiver's wall clock is dropped as stale
(the deployment's hosts share a clock, or NTP).

The receiver drops, and counts in `dropped`, packets that are oversized ("oversized"), fail the
HMAC ("unauthenticated": forged, or another secret), do not parse or name an unknown kind or peer
("malformed"), are addressed to another node ("misdirected"), are replays ("replayed"), or are
too old or too far in the future ("stale").

Thread-safety: `send`/`send_state` may be called from any thread (one lock); `receive` from one
thread (the election loop); counters may be read anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from common.replay_guard import FRAME_AGE_S_MAX_DEFAULT, ReplayGuard, is_stale
from healthchecker.bully import Kind, Message
from healthchecker.errors import HealthCheckerConfigError, require_positive_s
from healthchecker.supervision import (
    SharedRecord,
    SharedStateError,
    shared_from_json,
    shared_to_json,
)

PACKET_BYTES_MAX = 8192
TAG_BYTES = 32
WIRE_VERSION = 2
STATE_KIND = "STATE"
PACKET_AGE_S_MAX_DEFAULT = FRAME_AGE_S_MAX_DEFAULT
_U64_MAX = 2**64 - 1
_COUNTER_MAX = 2**63 - 1
_PEERS_MAX = 64

log = logging.getLogger(__name__)


class TransportConfigError(HealthCheckerConfigError):
    """An unusable transport setting (an empty secret, the node among its peers, ...)."""


class PacketError(Exception):
    """Base of the reasons a received packet is dropped; `counter` names its drop counter."""

    counter = "malformed"


class OversizedPacketError(PacketError):
    counter = "oversized"


class UnauthenticatedPacketError(PacketError):
    counter = "unauthenticated"


class MalformedPacketError(PacketError):
    counter = "malformed"


class MisdirectedPacketError(PacketError):
    counter = "misdirected"


class ReplayedPacketError(PacketError):
    counter = "replayed"


class StalePacketError(PacketError):
    counter = "stale"


@dataclass(frozen=True, slots=True)
class StateMessage:
    """A peer's supervision state (healthchecker.supervision.to_shared)."""

    sender: int
    entries: tuple[SharedRecord, ...]


@dataclass(frozen=True, slots=True)
class Envelope:
    payload: Message | StateMessage
    incarnation: int
    counter: int
    sent_at_ms: int  # the sender's wall clock

    @property
    def sender(self) -> int:
        return self.payload.sender


def encode_packet(
    payload: Message | StateMessage, to: int, secret: bytes, incarnation: int = 0,
    counter: int = 1, sent_at_ms: int | None = None,
) -> bytes:
    """One signed packet (`sent_at_ms` default: now); a STATE payload is trimmed (last entries
    first) to fit the bound."""
    sent_at_ms = round(time.time() * 1000) if sent_at_ms is None else sent_at_ms
    fields = {"v": WIRE_VERSION, "from": payload.sender, "to": to, "inc": incarnation,
              "ctr": counter, "ts": sent_at_ms}
    if isinstance(payload, StateMessage):
        rows = shared_to_json(payload.entries)
        while True:
            packet = _sign({**fields, "kind": STATE_KIND, "services": rows}, secret)
            if len(packet) <= PACKET_BYTES_MAX or not rows:
                break
            rows = rows[: len(rows) * 3 // 4]
    else:
        packet = _sign({**fields, "kind": str(payload.kind), "leader": payload.leader}, secret)
    assert len(packet) <= PACKET_BYTES_MAX, "bounded fields cannot exceed the packet bound"
    return packet


def _sign(fields: dict, secret: bytes) -> bytes:
    body = json.dumps(fields, separators=(",", ":")).encode("utf-8")
    return hmac.new(secret, body, hashlib.sha256).digest() + body


def decode_packet(packet: bytes, secret: bytes, node_id: int, peer_ids) -> Envelope:
    """Verify and parse one packet addressed to `node_id`; raises a `PacketError` (replays are
    the receiver's business: `ReplayGuard`)."""
    if len(packet) > PACKET_BYTES_MAX:
        raise OversizedPacketError(f"{len(packet)} bytes above {PACKET_BYTES_MAX}")
    tag, body = packet[:TAG_BYTES], packet[TAG_BYTES:]
    if len(tag) < TAG_BYTES or not hmac.compare_digest(
        tag, hmac.new(secret, body, hashlib.sha256).digest()
    ):
        raise UnauthenticatedPacketError("HMAC does not match")
    try:
        fields = json.loads(body.decode("utf-8"))
        version, kind, sender, to = fields["v"], fields["kind"], fields["from"], fields["to"]
        incarnation, counter, sent_at_ms = fields["inc"], fields["ctr"], fields["ts"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise MalformedPacketError(f"unparsable body: {error}") from error
    if version != WIRE_VERSION or not _is_int(sender) or not _is_int(to):
        raise MalformedPacketError(f"bad version or ids: v={version!r} from={sender!r}")
    if not (_is_int(incarnation) and 0 <= incarnation <= _U64_MAX):
        raise MalformedPacketError(f"bad incarnation {incarnation!r:.40}")
    if not (_is_int(counter) and 1 <= counter <= _COUNTER_MAX):
        raise MalformedPacketError(f"bad counter {counter!r:.40}")
    if not (_is_int(sent_at_ms) and 0 <= sent_at_ms <= _U64_MAX):
        raise MalformedPacketError(f"bad timestamp {sent_at_ms!r:.40}")
    if to != node_id:
        raise MisdirectedPacketError(f"addressed to {to}, this is {node_id}")
    if sender not in peer_ids:
        raise MalformedPacketError(f"unknown sender {sender}")
    return Envelope(_payload(fields, kind, sender), incarnation, counter, sent_at_ms)


def _payload(fields: dict, kind: object, sender: int) -> Message | StateMessage:
    if kind == STATE_KIND:
        try:
            return StateMessage(sender, shared_from_json(fields.get("services")))
        except SharedStateError as error:
            raise MalformedPacketError(f"bad state: {error}") from error
    try:
        election_kind = Kind(kind)
    except ValueError as error:
        raise MalformedPacketError(f"unknown kind {kind!r:.40}") from error
    leader = fields.get("leader")
    if leader is not None and not _is_int(leader):
        raise MalformedPacketError(f"bad leader {leader!r:.40}")
    return Message(election_kind, sender, leader)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class UdpTransport:
    """Sends `Message`s and states to peers by id; receives authenticated, fresh ones."""

    def __init__(
        self,
        node_id: int,
        listen: tuple[str, int],
        peers: Mapping[int, tuple[str, int]],
        secret: bytes,
        incarnation: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        packet_age_s_max: float = PACKET_AGE_S_MAX_DEFAULT,
    ) -> None:
        if not secret:
            raise TransportConfigError("an empty secret authenticates nothing")
        if node_id in peers:
            raise TransportConfigError(f"node {node_id} is among its own peers")
        if len(peers) > _PEERS_MAX:
            raise TransportConfigError(f"at most {_PEERS_MAX} peers, got {len(peers)}")
        self.node_id = node_id
        self.peers = dict(peers)
        self.incarnation = time.time_ns() if incarnation is None else incarnation
        if not 0 <= self.incarnation <= _U64_MAX:
            raise TransportConfigError(f"incarnation {self.incarnation} is not a 64-bit number")
        require_positive_s(TransportConfigError, "packet_age_s_max", packet_age_s_max)
        self._secret = secret
        self._clock = clock
        self._wall_clock = wall_clock
        self.packet_age_s_max = packet_age_s_max
        self._counter = 0
        self._send_lock = threading.Lock()
        self.replay_guard = ReplayGuard()
        self.dropped: Counter[str] = Counter()
        self.send_failures = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(listen)

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()

    def send(self, to: int, message: Message) -> None:
        """Best effort, like UDP itself: a failure is counted, never raised."""
        self._send(to, message)

    def send_state(self, to_peers: Iterable[int], entries: tuple[SharedRecord, ...]) -> None:
        for to in to_peers:
            self._send(to, StateMessage(self.node_id, entries))

    def _send(self, to: int, payload: Message | StateMessage) -> None:
        with self._send_lock:
            self._counter += 1
            packet = encode_packet(payload, to, self._secret, self.incarnation, self._counter,
                                   round(self._wall_clock() * 1000))
            try:
                self._sock.sendto(packet, self.peers[to])
            except OSError as error:  # e.g. a peer's host name does not resolve while it is down
                self.send_failures += 1
                log.debug("send %s to %s failed: %s", type(payload).__name__, to, error)

    def receive(self, timeout_s: float) -> Message | StateMessage | None:
        """The next valid message, or None when `timeout_s` passes or a packet was dropped."""
        self._sock.settimeout(max(timeout_s, 0.0001))
        try:
            packet, _address = self._sock.recvfrom(PACKET_BYTES_MAX + 1)
        except TimeoutError:
            return None
        except OSError as error:  # e.g. an ICMP error surfacing on the socket: not fatal
            self.dropped["receive_error"] += 1
            log.debug("receive failed: %s", error)
            return None
        try:
            envelope = decode_packet(packet, self._secret, self.node_id, self.peers)
            if is_stale(envelope.sent_at_ms, self._wall_clock(), self.packet_age_s_max):
                age_s = self._wall_clock() - envelope.sent_at_ms / 1000
                raise StalePacketError(f"from {envelope.sender}, sent {age_s:.1f}s ago")
            if not self.replay_guard.admit(
                envelope.sender, envelope.incarnation, envelope.counter, self._clock()
            ):
                raise ReplayedPacketError(
                    f"from {envelope.sender}: incarnation {envelope.incarnation} counter "
                    f"{envelope.counter} already seen or too old"
                )
        except PacketError as error:
            self.dropped[error.counter] += 1
            log.debug("dropped packet (%s): %s", error.counter, error)
            return None
        return envelope.payload

    def close(self) -> None:
        self._sock.close()
