"""A request body must arrive within its timeout, however it trickles in (regression: only each
recv was bounded, so a client sending a byte per socket timeout held its connection thread, and
then a partition's append lock, for as long as it liked); and it lands in the connection's
reusable buffer, never in the log, while it is on the wire."""

import pytest

from services.broker.network.body import ReceiveBuffer, RequestBody, SlowPeerError


class TricklingSocket:
    """Hands out its chunks one recv at a time; the clock reads each chunk's arrival time."""

    def __init__(self, chunks: list[tuple[float, bytes]]) -> None:
        self._chunks = list(chunks)
        self.now_s = 0.0

    def clock(self) -> float:
        return self.now_s

    def recv_into(self, view: memoryview) -> int:
        self.now_s, data = self._chunks.pop(0)
        view[:len(data)] = data
        return len(data)


def test_a_body_still_short_after_its_timeout_is_refused():
    sock = TricklingSocket([(1.0, b"ab"), (4.0, b"c"), (5.5, b"d")])
    body = RequestBody(sock, 10, timeout_s=5.0, clock=sock.clock)
    with pytest.raises(SlowPeerError):
        body.receive_rest()
    assert body.remaining == 6  # what arrived is still counted


def test_a_body_that_completes_by_its_last_recv_is_accepted():
    sock = TricklingSocket([(1.0, b"ab"), (4.9, b"cd"), (60.0, b"ef")])
    body = RequestBody(sock, 6, timeout_s=5.0, clock=sock.clock)
    assert body.read_exact(6) == b"abcdef"  # the deadline only refuses a body still short


def test_the_rest_lands_in_the_connections_buffer_which_is_reused_not_regrown():
    buffer = ReceiveBuffer(keep_bytes_max=64)
    sock = TricklingSocket([(1.0, b"ab"), (1.1, b"cdef"), (1.2, b"0123456789")])
    body = RequestBody(sock, 6, timeout_s=5.0, clock=sock.clock, buffer=buffer)
    assert bytes(body.receive_rest()) == b"abcdef"
    assert body.remaining == 0
    first = buffer.view(6).obj
    again = RequestBody(sock, 10, timeout_s=5.0, clock=sock.clock, buffer=buffer)
    assert bytes(again.receive_rest()) == b"0123456789"
    assert buffer.view(10).obj is buffer.view(6).obj, "grown once, then reused"
    assert buffer.view(6).obj is not first, "grown as a new array: a live view of the old stays"


def test_a_body_above_the_kept_size_gets_an_array_of_its_own():
    buffer = ReceiveBuffer(keep_bytes_max=8)
    kept = buffer.view(8).obj
    assert len(buffer.view(9)) == 9 and buffer.view(9).obj is not kept
    assert buffer.view(8).obj is kept, "an idle connection pins at most keep_bytes_max"
