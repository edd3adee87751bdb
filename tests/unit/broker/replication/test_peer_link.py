"""The sending side of signed peer frames (services/broker/replication/peer_link.py): requests
go out signed, answers are checked before anyone reads them, and a request that does not fit
its wire format is a counted error -- never a dead replication thread."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future

import pytest

from common.kaska.errors import ConnectionLostError
from common.kaska.protocol.frames import VERSION, Api
from common.kaska.protocol.metadata import BrokerInfo
from services.broker.network.peer_gate import ANSWER, OUTGOING
from services.broker.replication.node import PeerAddress, ReplicationConfig, ReplicationNode
from services.broker.replication.peer_link import PeerLink, PeerSigner
from services.broker.replication.quorum_store import QuorumState, QuorumStore
from services.broker.replication.wire.peer_auth import (
    AnswerMac,
    ForgedPeerFrameError,
    OutOfRangeFieldError,
    RequestStamp,
    UnencodableFrameError,
    open_request,
)
from services.broker.replication.wire.vote import VoteRequest, VoteResponse
from services.broker.storage.log import Log
from tests.unit.broker.storage.batches import SMALL

SECRET = b"cluster-secret"
WAIT_S = 10.0


@pytest.fixture
def listener():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def link_to(listener, signer: PeerSigner, node_id: int = 2) -> PeerLink:
    host, port = listener.getsockname()
    return PeerLink(signer, BrokerInfo(node_id, host, port), token=None,
                    connect_timeout_s=1.0, request_timeout_s=1.0)


def test_the_signer_stamps_every_frame_with_a_new_counter():
    signer = PeerSigner(1, SECRET, incarnation=5, wall_clock=lambda: 1000.0)
    first, second = signer.stamp(2), signer.stamp(3)
    assert (first.sender, first.receiver, first.incarnation, first.sent_at_ms) == \
        (1, 2, 5, 1_000_000)
    assert second.counter == first.counter + 1 and second.receiver == 3


def test_a_request_beyond_its_wire_format_is_a_counted_error(listener):
    signer = PeerSigner(1, SECRET)
    link = link_to(listener, signer)
    try:
        with pytest.raises(UnencodableFrameError):
            link.send(VoteRequest(1, 2**31, 2**31 - 1, 0, pre_vote=True))
    finally:
        link.close("test over")
    assert signer.refusals.snapshot() == {(OUTGOING, "unencodable"): 1}


def answer(link: PeerLink, stamp: RequestStamp, body: bytes, responder: int = 2,
           secret: bytes = SECRET) -> Future:
    mac = AnswerMac(secret, Api.VOTE, stamp)
    mac.update(body)
    sent, checked = Future(), Future()
    sent.set_result((0, bytearray(body + mac.trailer(responder))))
    link._check_answer(sent, checked, Api.VOTE, stamp)
    return checked


def test_answers_are_checked_before_they_are_read(listener):
    signer = PeerSigner(1, SECRET)
    link = link_to(listener, signer)
    try:
        stamp = signer.stamp(2)
        good = VoteResponse(3, True, 2).encode()
        assert bytes(answer(link, stamp, good).result()[1]) == good
        with pytest.raises(ForgedPeerFrameError):
            answer(link, stamp, good, secret=b"forger").result()
        with pytest.raises(ForgedPeerFrameError):  # an answer to another request
            answer(link, signer.stamp(2), good, secret=b"forger").result()
        with pytest.raises(OutOfRangeFieldError):
            answer(link, stamp, VoteResponse(2**31 - 1, True, 2).encode()).result()
    finally:
        link.close("test over")
    assert signer.refusals.snapshot() == {(ANSWER, "unauthenticated"): 2,
                                          (ANSWER, "out_of_range"): 1}


def test_error_answers_and_lost_connections_pass_through(listener):
    signer = PeerSigner(1, SECRET)
    link = link_to(listener, signer)
    try:
        stamp = signer.stamp(2)
        sent, checked = Future(), Future()
        sent.set_result((58, b"refused"))
        link._check_answer(sent, checked, Api.VOTE, stamp)
        assert checked.result() == (58, b"refused")
        sent, checked = Future(), Future()
        sent.set_exception(ConnectionLostError("gone"))
        link._check_answer(sent, checked, Api.VOTE, stamp)
        with pytest.raises(ConnectionLostError):
            checked.result()
    finally:
        link.close("test over")


def test_the_request_on_the_wire_is_signed_for_its_peer(listener):
    signer = PeerSigner(1, SECRET)
    link = link_to(listener, signer, node_id=3)
    try:
        link.send(VoteRequest(1, 4, 3, 99))
        peer, _ = listener.accept()
        with peer:
            peer.settimeout(WAIT_S)
            head = peer.recv(12, socket.MSG_WAITALL)
            length = int.from_bytes(head[:4], "big")
            frame = peer.recv(length - 8, socket.MSG_WAITALL)
    finally:
        link.close("test over")
    stamp, body = open_request(SECRET, Api.VOTE, VERSION, frame)
    assert (stamp.sender, stamp.receiver) == (1, 3)
    assert VoteRequest.decode(body) == VoteRequest(1, 4, 3, 99)


def test_a_poisoned_epoch_on_disk_costs_counted_errors_not_the_replication_thread(
        tmp_path, listener):
    """A voter that had adopted epoch 2**31-1 (before the bounds) failed
    every pre-vote with struct.error, which ended its replication thread."""
    host, port = listener.getsockname()
    with Log(tmp_path / "data", SMALL) as log:
        QuorumStore(log.data_dir / "@replication").save(QuorumState(2**31 - 1, None))
        signer = PeerSigner(1, SECRET)
        config = ReplicationConfig(node_id=1, peers=(PeerAddress(2, host, port),),
                                   election_timeout_min_s=0.01, election_timeout_max_s=0.02,
                                   vote_timeout_s=0.05, tick_interval_s=0.01,
                                   request_timeout_s=0.1)
        node = ReplicationNode(config, log, log.data_dir, peer_signer=signer)
        node.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while signer.refusals.snapshot().get((OUTGOING, "unencodable"), 0) < 3:
                assert time.monotonic() < deadline, "no pre-vote was attempted"
                time.sleep(0.01)
            loop = [t for t in threading.enumerate() if t.name == "kaska-replication-1"]
            assert loop and loop[0].is_alive()
        finally:
            node.stop()
