"""A request body must arrive within its timeout, however it trickles in (regression: only each
recv was bounded, so a client sending a byte per socket timeout held a partition's append lock
for as long as it liked)."""

import pytest

from services.broker.body import RequestBody, SlowPeerError


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
        body.recv_into_exactly(memoryview(bytearray(10)))
    assert body.remaining == 6  # what arrived is still counted


def test_a_body_that_completes_by_its_last_recv_is_accepted():
    sock = TricklingSocket([(1.0, b"ab"), (4.9, b"cd"), (60.0, b"ef")])
    body = RequestBody(sock, 6, timeout_s=5.0, clock=sock.clock)
    assert body.read_exact(6) == b"abcdef"  # the deadline only refuses a body still short


def _body_read_in_two_steps(rearm: bool) -> bytes:
    sock = TricklingSocket([(1.0, b"ab"), (101.0, b"cd"), (104.0, b"ef"), (106.0, b"gh")])
    body = RequestBody(sock, 8, timeout_s=5.0, clock=sock.clock)
    first = body.read_exact(2)
    sock.now_s = 100.0  # waiting for another producer's append to finish
    if rearm:
        body.rearm()
    region = bytearray(6)
    body.recv_into_exactly(memoryview(region))
    return first + bytes(region)


def test_rearm_gives_the_rest_a_full_timeout():
    assert _body_read_in_two_steps(rearm=True) == b"abcdefgh"
    with pytest.raises(SlowPeerError):
        _body_read_in_two_steps(rearm=False)
