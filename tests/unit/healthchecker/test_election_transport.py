"""Election packet codec and transport: authentication, bounds, malformed and misdirected
packets, state packets, and replay protection (incarnation + counter window + timestamp)."""

import hashlib
import hmac
import json
import socket
import time

import pytest

from common.replay_guard import ReplayGuard
from healthchecker.bully import Kind, Message
from healthchecker.supervision import Phase, SharedRecord
from healthchecker.transport import (
    PACKET_BYTES_MAX,
    MalformedPacketError,
    MisdirectedPacketError,
    OversizedPacketError,
    StateMessage,
    TransportConfigError,
    UdpTransport,
    UnauthenticatedPacketError,
    decode_packet,
    encode_packet,
)

SECRET = b"shared-secret"
PEERS = {1, 3}
NOW_MS = 1_700_000_000_000


def _signed(body: bytes, secret: bytes = SECRET) -> bytes:
    return hmac.new(secret, body, hashlib.sha256).digest() + body


def _body(**overrides) -> bytes:
    fields = {"v": 2, "kind": "ELECTION", "from": 1, "to": 2, "inc": 7, "ctr": 1,
              "ts": NOW_MS, "leader": None, **overrides}
    return json.dumps({k: v for k, v in fields.items() if v != "<absent>"}).encode()


@pytest.mark.parametrize("kind", list(Kind))
def test_round_trip_every_kind_with_its_incarnation_and_counter(kind):
    message = Message(kind, 3, leader=3 if kind is Kind.HEALTHCHECK_REPLY else None)
    envelope = decode_packet(encode_packet(message, 2, SECRET, 2**64 - 1, 42, NOW_MS),
                             SECRET, 2, PEERS)
    assert envelope.payload == message
    assert (envelope.incarnation, envelope.counter, envelope.sent_at_ms) == (2**64 - 1, 42,
                                                                             NOW_MS)


def _entry(name: str) -> SharedRecord:
    return SharedRecord(name, Phase.STARTING, 1.5, None, 2, 1, 0, 1.5, 0.5, True)


def test_state_round_trip_and_trimmed_to_the_packet_bound():
    state = StateMessage(3, (_entry("broker-1"), _entry("spark-worker-1")))
    assert decode_packet(encode_packet(state, 2, SECRET), SECRET, 2, PEERS).payload == state
    huge = StateMessage(3, tuple(_entry("s" * 125 + f"{i:03}") for i in range(48)))
    packet = encode_packet(huge, 2, SECRET)
    assert len(packet) <= PACKET_BYTES_MAX
    entries = decode_packet(packet, SECRET, 2, PEERS).payload.entries
    assert 0 < len(entries) < 48 and entries == huge.entries[: len(entries)]


def test_wrong_secret_is_unauthenticated():
    packet = encode_packet(Message(Kind.COORDINATOR, 3), 2, b"other-secret")
    with pytest.raises(UnauthenticatedPacketError):
        decode_packet(packet, SECRET, 2, PEERS)


def test_any_flipped_byte_is_rejected():
    packet = encode_packet(Message(Kind.ELECTION, 1), 2, SECRET, 5, 9)
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
        _body(kind="NOPE"),
        _body(v=1),
        _body(**{"from": "1"}),
        _body(leader="x"),
        _body(**{"from": 7}),
        _body(inc=-1),
        _body(inc=2**64),
        _body(ctr=0),
        _body(ctr=True),
        _body(ts="now"),
        _body(ctr="<absent>"),
        _body(kind="STATE", services=[["a", "up"]]),
        _body(kind="STATE", services="all"),
    ],
)
def test_authenticated_but_malformed_bodies(body):
    with pytest.raises(MalformedPacketError):
        decode_packet(_signed(body), SECRET, 2, PEERS)


def test_packet_for_another_node_is_misdirected():
    packet = encode_packet(Message(Kind.ELECTION, 1), 3, SECRET)
    with pytest.raises(MisdirectedPacketError):
        decode_packet(packet, SECRET, 2, PEERS)


# --- replay protection ------------------------------------------------------------------------


def test_replay_guard_accepts_each_counter_once_within_the_window():
    guard = ReplayGuard(window=64)
    assert guard.admit(1, incarnation=100, counter=10, now=0.0)
    assert not guard.admit(1, 100, 10, 0.0), "the same packet again"
    assert guard.admit(1, 100, 12, 0.0)
    assert guard.admit(1, 100, 11, 0.0), "reordered, not seen yet: fine"
    assert not guard.admit(1, 100, 11, 0.0)
    assert guard.admit(1, 100, 200, 0.0)
    assert not guard.admit(1, 100, 136, 0.0), "older than the window: cannot tell, drop"
    assert guard.admit(1, 100, 137, 0.0), "inside the window, never seen"
    assert guard.admit(3, 100, 1, 0.0), "senders are independent"


def test_replay_guard_incarnations():
    guard = ReplayGuard(incarnation_expiry_s=30.0)
    assert guard.admit(1, incarnation=100, counter=50, now=0.0)
    assert guard.admit(1, 200, 1, 1.0), "restarted sender: a newer incarnation starts over"
    assert not guard.admit(1, 100, 51, 2.0), "an older incarnation's packet is a replay"
    assert not guard.admit(1, 100, 52, 30.9)
    assert guard.admit(1, 100, 53, 31.0), "the newer one silent for 30 s: a clock stepped back"


def _pair(**kwargs):
    a = UdpTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 9)}, SECRET, incarnation=10,
                     **kwargs)
    b = UdpTransport(2, ("127.0.0.1", 0), {1: a.address}, SECRET, incarnation=20)
    a.peers[2] = b.address
    return a, b


def _receive_all(transport: UdpTransport, count: int) -> list:
    return [transport.receive(1.0) for _ in range(count)]


def test_transport_drops_and_counts_replayed_forged_and_stale_packets():
    a, b = _pair()
    sniffer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sniffer.bind(("127.0.0.1", 0))
    try:
        a.peers[2] = sniffer.getsockname()  # record what a sends to b
        a.send(2, Message(Kind.ELECTION, 1))
        recorded, _ = sniffer.recvfrom(PACKET_BYTES_MAX)
        a.peers[2] = b.address
        now_ms = round(time.time() * 1000)
        forged = encode_packet(Message(Kind.COORDINATOR, 1), 2, b"guess", 10, 99, now_ms)
        stale = encode_packet(Message(Kind.COORDINATOR, 1), 2, SECRET, 10, 98,
                              now_ms - 3_600_000)
        future = encode_packet(Message(Kind.COORDINATOR, 1), 2, SECRET, 10, 97,
                               now_ms + 3_600_000)
        for packet in (recorded, recorded, forged, stale, future, recorded):
            sniffer.sendto(packet, b.address)
        received = _receive_all(b, 6)
        assert received == [Message(Kind.ELECTION, 1), None, None, None, None, None]
        assert b.dropped == {"replayed": 2, "unauthenticated": 1, "stale": 2}
        a.send(2, Message(Kind.HEALTHCHECK, 1))  # the real sender is unaffected
        assert b.receive(1.0) == Message(Kind.HEALTHCHECK, 1)
    finally:
        sniffer.close()
        a.close()
        b.close()


def test_transport_sends_states_with_fresh_counters():
    a, b = _pair()
    try:
        entries = (_entry("broker-1"),)
        a.send_state([2], entries)
        a.send_state([2], entries)
        assert _receive_all(b, 2) == [StateMessage(1, entries)] * 2
        assert b.dropped == {}
    finally:
        a.close()
        b.close()


def test_transport_configuration_errors_are_named():
    with pytest.raises(TransportConfigError, match="empty secret"):
        UdpTransport(1, ("127.0.0.1", 0), {}, b"")
    with pytest.raises(TransportConfigError, match="among its own peers"):
        UdpTransport(1, ("127.0.0.1", 0), {1: ("127.0.0.1", 1)}, SECRET)
    with pytest.raises(TransportConfigError, match="packet_age_s_max"):
        UdpTransport(1, ("127.0.0.1", 0), {}, SECRET, packet_age_s_max=0)
