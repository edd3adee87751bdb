"""PeerRequests.send_to_each (a vote round): links it lacks are made on connect threads, so a
frozen peer (its connect and AUTHENTICATE never finish) delays only its own answer, not the
other peers'; a peer dropped while it connects never gets its link adopted. Fake
links stand in for PeerLink; the threads are real, nothing sleeps a fixed time."""

import threading
from concurrent.futures import Future

import pytest

from common.kaska.errors import BrokerUnavailableError
from services.broker.replication.config import PeerAddress, ReplicationConfig
from services.broker.replication.peer_requests import PeerRequests

WAIT_S = 10.0


class FakeLink:
    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.alive = True
        self.sent: list = []
        self.closed: str | None = None

    def send(self, request) -> Future:
        self.sent.append(request)
        answered: Future = Future()
        answered.set_result((0, b"answer"))
        return answered

    def close(self, reason: str) -> None:
        self.alive, self.closed = False, reason


@pytest.fixture
def requests(monkeypatch):
    """Peers 2 and 3; 2's connect blocks until `release` is set, 3's is instant."""
    release = threading.Event()
    made: dict[int, FakeLink] = {}
    refuse: set[int] = set()

    def make_link(self, peer: int) -> FakeLink:
        if peer in refuse:
            raise BrokerUnavailableError(f"peer {peer} refuses")
        if peer == 2:
            assert release.wait(WAIT_S), "never released"
        made[peer] = FakeLink(peer)
        return made[peer]

    monkeypatch.setattr(PeerRequests, "_make_link", make_link)
    config = ReplicationConfig(node_id=1, peers=(PeerAddress(2, "h", 1), PeerAddress(3, "h", 2)))
    peers = {p.node_id: p for p in config.peers}
    return PeerRequests(config, peers, signer=None), release, made, refuse


def test_a_frozen_peer_delays_only_its_own_answer(requests):
    peer_requests, release, made, _refuse = requests
    futures = peer_requests.send_to_each({2, 3}, "vote")
    by_peer = {peer: future for future, peer in futures.items()}
    assert set(by_peer) == {2, 3}
    assert by_peer[3].result(timeout=WAIT_S) == (0, b"answer"), "3 answered while 2 connects"
    assert not by_peer[2].done(), "the scenario: 2's connect is still under way"
    assert peer_requests.send_to_each({2}, "vote again") == {}, "one connect per peer at a time"
    release.set()
    assert by_peer[2].result(timeout=WAIT_S) == (0, b"answer")
    assert made[2].sent == ["vote"] and made[3].sent == ["vote"]
    # The links are adopted: the next round and a fetch use them, no new connect.
    assert peer_requests._connection(3) is made[3] and peer_requests._connection(2) is made[2]
    again = peer_requests.send_to_each({2, 3}, "next round")
    assert sorted(again.values()) == [2, 3] and made[2].sent == ["vote", "next round"]


def test_a_peer_dropped_while_it_connects_never_gets_its_link_adopted(requests):
    peer_requests, release, made, _refuse = requests
    futures = peer_requests.send_to_each({2}, "vote")
    (future,) = futures
    peer_requests.drop(2)  # the round gave up on it (its vote timeout)
    release.set()
    with pytest.raises(BrokerUnavailableError):
        future.result(timeout=WAIT_S)
    assert made[2].closed and made[2].sent == [], "closed unused"
    assert 2 not in peer_requests.connections
    peer_requests._adopt_made()
    assert 2 not in peer_requests.connections


def test_an_unreachable_peer_fails_its_future_and_may_be_tried_again(requests):
    peer_requests, _release, made, refuse = requests
    refuse.add(3)
    (future,) = peer_requests.send_to_each({3}, "vote")
    with pytest.raises(BrokerUnavailableError):
        future.result(timeout=WAIT_S)
    refuse.clear()
    (again,) = peer_requests.send_to_each({3}, "vote")
    assert again.result(timeout=WAIT_S) == (0, b"answer") and made[3].sent == ["vote"]
