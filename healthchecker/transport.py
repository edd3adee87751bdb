"""Election packets over UDP, authenticated with HMAC-SHA256 over a shared secret.

Packet format (at most `PACKET_BYTES_MAX` bytes):

    32 bytes  HMAC-SHA256(secret, body)
    ...       body: UTF-8 JSON {"v": 1, "kind": "ELECTION", "from": 2, "to": 3, "leader": null}

The receiver drops, and counts, packets that are oversized, fail the HMAC, do not parse, name an
unknown kind or peer, or are addressed to another node. The HMAC proves a packet came from a
holder of the secret; it does not stop a replay of a recorded packet, which at worst makes a node
answer or run one extra election.

Thread-safety: one thread sends and receives (the election loop); counters may be read anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
from collections import Counter
from collections.abc import Mapping

from healthchecker.bully import Kind, Message

PACKET_BYTES_MAX = 512
TAG_BYTES = 32
WIRE_VERSION = 1

log = logging.getLogger(__name__)


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


def encode_packet(message: Message, to: int, secret: bytes) -> bytes:
    body = json.dumps(
        {"v": WIRE_VERSION, "kind": str(message.kind), "from": message.sender, "to": to,
         "leader": message.leader},
        separators=(",", ":"),
    ).encode("utf-8")
    packet = hmac.new(secret, body, hashlib.sha256).digest() + body
    assert len(packet) <= PACKET_BYTES_MAX
    return packet


def decode_packet(packet: bytes, secret: bytes, node_id: int, peer_ids) -> Message:
    """Verify and parse one packet addressed to `node_id`; raises a `PacketError`."""
    if len(packet) > PACKET_BYTES_MAX:
        raise OversizedPacketError(f"{len(packet)} bytes above {PACKET_BYTES_MAX}")
    tag, body = packet[:TAG_BYTES], packet[TAG_BYTES:]
    if len(tag) < TAG_BYTES or not hmac.compare_digest(
        tag, hmac.new(secret, body, hashlib.sha256).digest()
    ):
        raise UnauthenticatedPacketError("HMAC does not match")
    try:
        fields = json.loads(body.decode("utf-8"))
        kind = Kind(fields["kind"])
        sender, to, leader, version = fields["from"], fields["to"], fields["leader"], fields["v"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise MalformedPacketError(f"unparsable body: {error}") from error
    if version != WIRE_VERSION or not isinstance(sender, int) or not isinstance(to, int):
        raise MalformedPacketError(f"bad version or ids: v={version!r} from={sender!r}")
    if leader is not None and not isinstance(leader, int):
        raise MalformedPacketError(f"bad leader {leader!r}")
    if to != node_id:
        raise MisdirectedPacketError(f"addressed to {to}, this is {node_id}")
    if sender not in peer_ids:
        raise MalformedPacketError(f"unknown sender {sender}")
    return Message(kind, sender, leader)


class UdpTransport:
    """Sends `Message`s to peers by id and receives authenticated ones (format: module doc)."""

    def __init__(
        self,
        node_id: int,
        listen: tuple[str, int],
        peers: Mapping[int, tuple[str, int]],
        secret: bytes,
    ) -> None:
        assert secret, "an empty secret authenticates nothing"
        assert node_id not in peers
        self.node_id = node_id
        self.peers = dict(peers)
        self._secret = secret
        self.dropped: Counter[str] = Counter()
        self.send_failures = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(listen)

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()

    def send(self, to: int, message: Message) -> None:
        """Best effort, like UDP itself: a failure is counted, never raised."""
        try:
            self._sock.sendto(encode_packet(message, to, self._secret), self.peers[to])
        except OSError as error:  # e.g. a peer's host name does not resolve while it is down
            self.send_failures += 1
            log.debug("send %s to %s failed: %s", message.kind, to, error)

    def receive(self, timeout_s: float) -> Message | None:
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
            return decode_packet(packet, self._secret, self.node_id, self.peers)
        except PacketError as error:
            self.dropped[error.counter] += 1
            log.debug("dropped packet (%s): %s", error.counter, error)
            return None

    def close(self) -> None:
        self._sock.close()
