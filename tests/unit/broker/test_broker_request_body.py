"""RequestBody keeps count of the frame's unread bytes, whatever a handler reads."""

import socket

import pytest

from common.kaska.errors import FrameTooLargeError, InvalidRequestError
from services.broker.body import PeerClosedError, RequestBody


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_reads_and_drain_leave_the_next_frame_intact(pair):
    server, client = pair
    client.sendall(b"0123456789NEXT")
    body = RequestBody(server, 10)
    assert body.read_exact(3) == b"012"
    body.drain()
    assert body.remaining == 0
    assert server.recv(4) == b"NEXT"


def test_recv_into_fills_a_region_in_place(pair):
    server, client = pair
    region = bytearray(8)
    client.sendall(b"abcdefgh")
    body = RequestBody(server, 8)
    body.recv_into_exactly(memoryview(region))
    assert region == b"abcdefgh" and body.remaining == 0


def test_reading_past_the_frame_is_refused(pair):
    server, _client = pair
    with pytest.raises(InvalidRequestError, match="body ends early"):
        RequestBody(server, 2).read_exact(3)


def test_read_all_over_its_bound_is_refused_before_reading(pair):
    server, _client = pair
    body = RequestBody(server, 100)
    with pytest.raises(FrameTooLargeError):
        body.read_all(10)
    assert body.remaining == 100


def test_peer_closing_midway_counts_what_arrived(pair):
    server, client = pair
    client.sendall(b"abc")
    client.close()
    body = RequestBody(server, 10)
    with pytest.raises(PeerClosedError):
        body.recv_into_exactly(memoryview(bytearray(10)))
    assert body.remaining == 7
