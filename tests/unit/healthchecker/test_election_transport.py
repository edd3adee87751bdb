"""Election packet codec: authentication, bounds, malformed and misdirected packets."""

import hashlib
import hmac
import json

import pytest

from healthchecker.bully import Kind, Message
from healthchecker.transport import (
    PACKET_BYTES_MAX,
    MalformedPacketError,
    MisdirectedPacketError,
    OversizedPacketError,
    UnauthenticatedPacketError,
    decode_packet,
    encode_packet,
)

SECRET = b"shared-secret"
PEERS = {1, 3}


def _signed(body: bytes, secret: bytes = SECRET) -> bytes:
    return hmac.new(secret, body, hashlib.sha256).digest() + body


@pytest.mark.parametrize("kind", list(Kind))
def test_round_trip_every_kind(kind):
    message = Message(kind, 3, leader=3 if kind is Kind.HEALTHCHECK_REPLY else None)
    assert decode_packet(encode_packet(message, 2, SECRET), SECRET, 2, PEERS) == message


def test_wrong_secret_is_unauthenticated():
    packet = encode_packet(Message(Kind.COORDINATOR, 3), 2, b"other-secret")
    with pytest.raises(UnauthenticatedPacketError):
        decode_packet(packet, SECRET, 2, PEERS)


def test_any_flipped_byte_is_rejected():
    packet = encode_packet(Message(Kind.ELECTION, 1), 2, SECRET)
    for index in range(len(packet)):
        tampered = bytearray(packet)
        tampered[index] ^= 0x40
        with pytest.raises(UnauthenticatedPacketError):
            decode_packet(bytes(tampered), SECRET, 2, PEERS)


def test_short_and_oversized_packets():
    with pytest.raises(UnauthenticatedPacketError):
        decode_packet(b"tiny", SECRET, 2, PEERS)
    with pytest.raises(OversizedPacketError):
        decode_packet(b"x" * (PACKET_BYTES_MAX + 1), SECRET, 2, PEERS)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        json.dumps({"v": 1, "kind": "NOPE", "from": 1, "to": 2, "leader": None}).encode(),
        json.dumps({"v": 2, "kind": "ELECTION", "from": 1, "to": 2, "leader": None}).encode(),
        json.dumps({"v": 1, "kind": "ELECTION", "from": "1", "to": 2, "leader": None}).encode(),
        json.dumps({"v": 1, "kind": "ELECTION", "from": 1, "to": 2, "leader": "x"}).encode(),
        json.dumps({"v": 1, "kind": "ELECTION", "from": 7, "to": 2, "leader": None}).encode(),
        json.dumps({"v": 1, "kind": "ELECTION", "to": 2}).encode(),
    ],
)
def test_authenticated_but_malformed_bodies(body):
    with pytest.raises(MalformedPacketError):
        decode_packet(_signed(body), SECRET, 2, PEERS)


def test_packet_for_another_node_is_misdirected():
    packet = encode_packet(Message(Kind.ELECTION, 1), 3, SECRET)
    with pytest.raises(MisdirectedPacketError):
        decode_packet(packet, SECRET, 2, PEERS)
