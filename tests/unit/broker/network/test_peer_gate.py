"""The broker's door for peer frames (services/broker/network/peer_gate.py): what gets in, what is
refused, counted and logged once per peer, and what the replay window remembers."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pytest

from common.kaska.protocol.frames import VERSION, Api
from services.broker.network.peer_gate import (
    LOGGED_PEERS_MAX,
    REQUEST,
    PeerGate,
    PeerRefusals,
    PeerSession,
)
from services.broker.replication.wire.peer_auth import (
    ForgedPeerFrameError,
    ImpostorPeerFrameError,
    MalformedPeerFrameError,
    MisdirectedPeerFrameError,
    OutOfRangeFieldError,
    ReplayedPeerFrameError,
    RequestStamp,
    StalePeerFrameError,
    TruncatedPeerFrameError,
    UnknownGroupPeerFrameError,
    UnknownPeerFrameSenderError,
    open_answer,
    request_trailer,
)
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest
from services.broker.replication.wire.replication_bounds import (
    check_fetch_request,
    check_vote_request,
)
from services.broker.replication.wire.vote import VoteRequest

SECRET = b"cluster-secret"
NOW_S = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def gate():
    return PeerGate(1, [2, 3], SECRET, clock=Clock(), wall_clock=lambda: NOW_S)


def vote_frame(request: VoteRequest, sender: int = 2, receiver: int = 1, counter: int = 1,
               incarnation: int = 7, secret: bytes = SECRET, sent_at_s: float = NOW_S,
               group: int = 0) -> bytes:
    body = request.encode()
    stamp = RequestStamp(sender, receiver, incarnation, counter, round(sent_at_s * 1000),
                         group=group)
    return body + request_trailer(secret, Api.VOTE, VERSION, (body,), stamp)


def open_vote(gate: PeerGate, frame: bytes, session: PeerSession | None = None):
    return gate.open_request(Api.VOTE, frame, session or PeerSession("10.0.0.9"),
                             VoteRequest.decode, check_vote_request,
                             lambda request: request.candidate)


def refused(gate: PeerGate, reason: str) -> int:
    return gate.refusals.snapshot().get((REQUEST, reason), 0)


def test_a_signed_fresh_frame_from_the_candidate_itself_gets_in(gate):
    session = PeerSession("10.0.0.2")
    opened = open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10)), session)
    assert opened.request == VoteRequest(2, 5, 4, 10)
    assert opened.stamp.sender == 2 and session.node_id == 2
    assert gate.refusals.snapshot() == {}


@pytest.mark.parametrize(("frame", "error", "reason"), [
    (VoteRequest(2, 5, 4, 10).encode(), TruncatedPeerFrameError, "truncated"),
    (vote_frame(VoteRequest(2, 5, 4, 10), secret=b"forger"), ForgedPeerFrameError,
     "unauthenticated"),
    (vote_frame(VoteRequest(2, 5, 4, 10), receiver=3), MisdirectedPeerFrameError,
     "misdirected"),
    (vote_frame(VoteRequest(9, 5, 4, 10), sender=9), UnknownPeerFrameSenderError,
     "unknown_sender"),
    (vote_frame(VoteRequest(2, 5, 4, 10), sender=3), ImpostorPeerFrameError, "impostor"),
    (vote_frame(VoteRequest(2, 2**31 - 1, 4, 10)), OutOfRangeFieldError, "out_of_range"),
    (vote_frame(VoteRequest(2, 5, 4, 10), sent_at_s=NOW_S - 31), StalePeerFrameError,
     "stale"),
    (vote_frame(VoteRequest(2, 5, 4, 10), sent_at_s=NOW_S + 31), StalePeerFrameError,
     "stale"),
])
def test_refused_frames_are_counted_by_reason(gate, frame, error, reason):
    with pytest.raises(error):
        open_vote(gate, frame)
    assert gate.refusals.snapshot() == {(REQUEST, reason): 1}


def test_a_signed_body_that_does_not_parse_is_malformed(gate):
    body = b"\x00\x00\x00\x02"
    stamp = RequestStamp(2, 1, 7, 1, round(NOW_S * 1000))
    frame = body + request_trailer(SECRET, Api.VOTE, VERSION, (body,), stamp)
    with pytest.raises(MalformedPeerFrameError):
        open_vote(gate, frame)
    assert refused(gate, "malformed") == 1


def test_a_replayed_frame_is_refused_and_its_successor_admitted(gate):
    frame = vote_frame(VoteRequest(2, 5, 4, 10), counter=5)
    open_vote(gate, frame)
    with pytest.raises(ReplayedPeerFrameError):
        open_vote(gate, frame)
    open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=6))
    open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=4))  # late, not seen: fine
    with pytest.raises(ReplayedPeerFrameError):  # an older incarnation: a replay
        open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=99, incarnation=6))
    assert refused(gate, "replayed") == 2


def test_a_refused_frame_leaves_no_mark_in_the_replay_window(gate):
    # Signed with a huge incarnation but refused (out of range): had the window taken it, the
    # real broker 2 (incarnation 7) would be locked out as "an older incarnation".
    with pytest.raises(OutOfRangeFieldError):
        open_vote(gate, vote_frame(VoteRequest(2, 2**31 - 1, 4, 10), incarnation=2**60))
    with pytest.raises(ImpostorPeerFrameError):
        open_vote(gate, vote_frame(VoteRequest(3, 5, 4, 10), sender=2, incarnation=2**60))
    open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), incarnation=7))


def test_a_connection_speaks_for_one_broker_only(gate):
    session = PeerSession("10.0.0.2")
    open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10)), session)
    with pytest.raises(ImpostorPeerFrameError, match="speaks for broker 2"):
        open_vote(gate, vote_frame(VoteRequest(3, 5, 4, 10), sender=3), session)
    open_vote(gate, vote_frame(VoteRequest(3, 5, 4, 10), sender=3), PeerSession("10.0.0.3"))


def test_a_fetch_claiming_another_follower_is_refused(gate):
    body = ReplicaFetchRequest(2, 5, 1000, 4, 1 << 20, 0).encode()
    stamp = RequestStamp(3, 1, 7, 1, round(NOW_S * 1000))
    frame = body + request_trailer(SECRET, Api.REPLICA_FETCH, VERSION, (body,), stamp)
    with pytest.raises(ImpostorPeerFrameError, match="signed by broker 3, speaks for broker 2"):
        gate.open_request(Api.REPLICA_FETCH, frame, PeerSession("10.0.0.3"),
                          ReplicaFetchRequest.decode, check_fetch_request,
                          lambda request: request.follower)


def test_a_broker_without_a_secret_takes_no_peer_frame():
    gate = PeerGate(1, [2, 3], None, wall_clock=lambda: NOW_S)
    with pytest.raises(ForgedPeerFrameError, match="no cluster secret"):
        open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10)))


def test_refusals_are_logged_once_per_peer(gate, caplog):
    caplog.set_level(logging.DEBUG, logger="services.broker.network.peer_gate")
    for _ in range(5):
        with pytest.raises(ForgedPeerFrameError):
            open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), secret=b"x"),
                      PeerSession("10.0.0.66"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    debugs = [r for r in caplog.records if r.levelno == logging.DEBUG and "10.0.0.66" in
              r.getMessage()]
    assert len(warnings) == 1 and "10.0.0.66" in warnings[0].getMessage() and len(debugs) == 4
    assert "further refusals from it are counted" in warnings[0].getMessage()
    assert not any("further refusals" in r.getMessage() for r in debugs)
    assert refused(gate, "unauthenticated") == 5


def test_at_most_logged_peers_max_peers_are_logged_at_warning(caplog):
    # A flood from ever new addresses must not flood the log: past the bound, DEBUG only.
    caplog.set_level(logging.DEBUG, logger="services.broker.network.peer_gate")
    refusals = PeerRefusals()
    for i in range(LOGGED_PEERS_MAX + 1):
        peer = f"10.0.{i // 256}.{i % 256}"
        refusals.refused(REQUEST, ForgedPeerFrameError("bad tag"), peer)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(caplog.records) == LOGGED_PEERS_MAX + 1 == 1025
    assert len(warnings) == LOGGED_PEERS_MAX and caplog.records[-1].levelno == logging.DEBUG


@dataclass(frozen=True)
class Slice:
    fd: int
    position: int
    nbytes: int


def test_the_answer_seal_covers_the_data_from_the_files(gate, tmp_path):
    opened = open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10)))
    path = tmp_path / "segment"
    path.write_bytes(b"x" * 100 + b"DATA" * 1000 + b"y" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        trailer = gate.seal(opened, b"prefix", [Slice(fd, 100, 4000)])
    finally:
        os.close(fd)
    answer = b"prefix" + b"DATA" * 1000 + trailer
    assert bytes(open_answer(SECRET, Api.VOTE, opened.stamp, 1, answer)) == \
        b"prefix" + b"DATA" * 1000
    tampered = b"prefix" + b"DATA" * 999 + b"DATB" + trailer
    with pytest.raises(ForgedPeerFrameError):
        open_answer(SECRET, Api.VOTE, opened.stamp, 1, tampered)


def test_frames_of_each_replication_group_get_in_with_counters_of_their_own():
    """Each group of a broker signs with its own counter: the same counter in two groups is
    no replay, the same counter twice in one group is; answers carry the group's incarnation."""
    gate = PeerGate(1, [2, 3], SECRET, clock=Clock(), wall_clock=lambda: NOW_S,
                    data_incarnations=(11, 12, 13))
    first = open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=1, group=0))
    second = open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=1, group=2))
    assert (first.stamp.group, second.stamp.group) == (0, 2)
    with pytest.raises(ReplayedPeerFrameError):
        open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=1, group=2))
    trailer = gate.seal(second, b"answer")
    assert int.from_bytes(trailer[-32 - 8:-32], "big") == 13


def test_a_frame_of_a_group_this_broker_does_not_run_or_of_another_group_on_the_connection():
    gate = PeerGate(1, [2, 3], SECRET, clock=Clock(), wall_clock=lambda: NOW_S,
                    data_incarnations=(11, 12))
    with pytest.raises(UnknownGroupPeerFrameError, match="runs groups 0..1"):
        open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), group=2))
    session = PeerSession("10.0.0.2")
    open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=2, group=1), session)
    with pytest.raises(UnknownGroupPeerFrameError, match="speaks for replication group 1"):
        open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), counter=3, group=0), session)
    assert refused(gate, "unknown_group") == 2


def test_an_answer_is_bound_to_its_requests_group():
    """A leader's answer to group 1's request does not verify as the answer to group 2's
    request with the same sender, receiver, incarnation and counter."""
    gate = PeerGate(1, [2, 3], SECRET, clock=Clock(), wall_clock=lambda: NOW_S,
                    data_incarnations=(11, 12, 13))
    opened = open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10), group=1))
    answer = b"body" + gate.seal(opened, b"body")
    assert bytes(open_answer(SECRET, Api.VOTE, opened.stamp, 1, answer)) == b"body"
    other = RequestStamp(**{**{f: getattr(opened.stamp, f) for f in (
        "sender", "receiver", "incarnation", "counter", "sent_at_ms", "cluster_id",
        "data_incarnation", "learner")}, "group": 2})
    with pytest.raises(ForgedPeerFrameError):
        open_answer(SECRET, Api.VOTE, other, 1, answer)


def test_a_slice_cut_short_under_the_seal_ends_the_seal_there(gate, tmp_path):
    # The file shrank under the send (a segment deleted and truncated): the seal covers what
    # is there, and the MAC will not hold for the bytes promised.
    opened = open_vote(gate, vote_frame(VoteRequest(2, 5, 4, 10)))
    path = tmp_path / "segment"
    path.write_bytes(b"DATA" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        trailer = gate.seal(opened, b"prefix", [Slice(fd, 0, 4000)])
    finally:
        os.close(fd)
    assert bytes(open_answer(SECRET, Api.VOTE, opened.stamp, 1, b"prefix" + b"DATA" * 10 +
                             trailer)) == b"prefix" + b"DATA" * 10
