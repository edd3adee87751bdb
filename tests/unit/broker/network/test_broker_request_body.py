"""RequestBody keeps count of the frame's unread bytes, whatever a handler reads."""

import socket

import pytest

from common.kaska.errors import FrameTooLargeError, InvalidRequestError
from services.broker.network.body import PeerClosedError, RequestBody


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


def test_receive_rest_takes_the_whole_rest_of_the_frame_and_nothing_more(pair):
    server, client = pair
    client.sendall(b"abcdefghNEXT")
    body = RequestBody(server, 8)
    assert bytes(body.receive_rest()) == b"abcdefgh" and body.remaining == 0
    assert server.recv(4) == b"NEXT"


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
        body.receive_rest()
    assert body.remaining == 7
