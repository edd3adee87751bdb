"""Signed peer frames (services/broker/replication/wire/peer_auth.py) and the ranges of their
numbers (services/broker/replication/wire/replication_bounds.py), byte by byte."""

from __future__ import annotations

import pytest

from common.kaska.protocol.frames import VERSION, Api
from common.kaska.protocol.metadata import NO_LEADER
from services.broker.replication.wire.peer_auth import (
    ANSWER_TRAILER_BYTES,
    REQUEST_TRAILER_BYTES,
    AnswerMac,
    ForgedPeerFrameError,
    MisdirectedPeerFrameError,
    OutOfRangeFieldError,
    RequestStamp,
    TruncatedPeerFrameError,
    open_answer,
    open_request,
    request_trailer,
)
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.replication_bounds import (
    EPOCH_MAX,
    FETCH_WAIT_MS_MAX,
    INDEX_MAX,
    NODE_ID_MAX,
    PARTITIONS_MAX,
    check_fetch_request,
    check_fetch_response,
    check_vote_request,
    check_vote_response,
)
from services.broker.replication.wire.vote import VoteRequest, VoteResponse
from services.broker.storage.log import PARTITIONS_MAX as STORAGE_PARTITIONS_MAX

SECRET = b"cluster-secret"
STAMP = RequestStamp(sender=2, receiver=1, incarnation=7, counter=41, sent_at_ms=1_700_000_000)
VOTE = VoteRequest(2, 5, 4, 100)


def signed_vote(request: VoteRequest = VOTE, secret: bytes = SECRET,
                stamp: RequestStamp = STAMP) -> bytes:
    body = request.encode()
    return body + request_trailer(secret, Api.VOTE, VERSION, (body,), stamp)


def test_the_tags_are_keyed_blake3_under_keys_derived_per_direction():
    """The wire format, computed here with blake3 itself: a request's tag is keyed BLAKE3 over
    the domain, api, version, body and stamp under the request key; the answer key differs, so a
    request's tag never passes for an answer's."""
    import struct

    import blake3

    from services.broker.replication.wire import peer_auth

    frame = signed_vote()
    body, trailer = frame[:-REQUEST_TRAILER_BYTES], frame[-REQUEST_TRAILER_BYTES:]
    packed, tag = trailer[:-32], trailer[-32:]
    request_key = blake3.blake3(SECRET, derive_key_context=peer_auth._REQUEST_KEY_CONTEXT).digest()
    answer_key = blake3.blake3(SECRET, derive_key_context=peer_auth._ANSWER_KEY_CONTEXT).digest()
    assert request_key != answer_key
    signed = b"kaska-peer-request\0" + struct.pack(">HH", Api.VOTE, VERSION) + body + packed
    assert tag == blake3.blake3(signed, key=request_key).digest()
    assert tag != blake3.blake3(signed, key=answer_key).digest()


def test_a_signed_request_opens_to_its_stamp_and_body():
    stamp, body = open_request(SECRET, Api.VOTE, VERSION, signed_vote())
    assert stamp == STAMP
    assert VoteRequest.decode(body) == VoteRequest(2, 5, 4, 100)


def test_the_trailer_covers_body_parts_in_order():
    body = VoteRequest(2, 5, 4, 100).encode()
    whole = request_trailer(SECRET, Api.VOTE, VERSION, (body,), STAMP)
    assert request_trailer(SECRET, Api.VOTE, VERSION, (body[:5], body[5:]), STAMP) == whole


@pytest.mark.parametrize("position", [0, 10, -REQUEST_TRAILER_BYTES + 3, -1])
def test_any_flipped_byte_is_a_forgery(position):
    frame = bytearray(signed_vote())
    frame[position] ^= 0x01
    with pytest.raises(ForgedPeerFrameError):
        open_request(SECRET, Api.VOTE, VERSION, bytes(frame))


def test_another_secret_is_a_forgery():
    with pytest.raises(ForgedPeerFrameError):
        open_request(SECRET, Api.VOTE, VERSION, signed_vote(secret=b"another-secret"))


def test_a_vote_signature_does_not_pass_as_a_fetch():
    with pytest.raises(ForgedPeerFrameError):
        open_request(SECRET, Api.REPLICA_FETCH, VERSION, signed_vote())


def test_an_unsigned_or_truncated_frame_is_refused():
    with pytest.raises(TruncatedPeerFrameError):
        open_request(SECRET, Api.VOTE, VERSION, VoteRequest(2, 5, 4, 100).encode())
    with pytest.raises(TruncatedPeerFrameError):
        open_request(SECRET, Api.VOTE, VERSION, b"")
    with pytest.raises(ForgedPeerFrameError):  # cut by one byte: the tag no longer matches
        open_request(SECRET, Api.VOTE, VERSION, signed_vote()[:-1])


def signed_answer(body: bytes, responder: int = 1, stamp: RequestStamp = STAMP) -> bytes:
    mac = AnswerMac(SECRET, Api.VOTE, stamp)
    mac.update(body)
    return body + mac.trailer(responder)


def test_an_answer_is_bound_to_its_request_and_responder():
    body = VoteResponse(5, True, 1).encode()
    frame = signed_answer(body)
    assert bytes(open_answer(SECRET, Api.VOTE, STAMP, 1, frame)) == body
    other_request = RequestStamp(2, 1, 7, 42, STAMP.sent_at_ms)
    with pytest.raises(ForgedPeerFrameError):  # an old answer replayed to a later request
        open_answer(SECRET, Api.VOTE, other_request, 1, frame)
    with pytest.raises(MisdirectedPeerFrameError):  # a valid answer, from another broker
        open_answer(SECRET, Api.VOTE, STAMP, 3, frame)
    forged = bytearray(frame)
    forged[0] ^= 0x80
    with pytest.raises(ForgedPeerFrameError):
        open_answer(SECRET, Api.VOTE, STAMP, 1, bytes(forged))
    with pytest.raises(TruncatedPeerFrameError):
        open_answer(SECRET, Api.VOTE, STAMP, 1, body[:ANSWER_TRAILER_BYTES - 1])


def test_an_answer_mac_fed_in_pieces_equals_one_fed_whole():
    whole, pieces = AnswerMac(SECRET, Api.REPLICA_FETCH, STAMP), \
        AnswerMac(SECRET, Api.REPLICA_FETCH, STAMP)
    whole.update(b"prefix" + b"data" * 100)
    pieces.update(b"prefix")
    pieces.update(b"data" * 100)
    assert whole.trailer(1) == pieces.trailer(1)


# -- ranges ------------------------------------------------------------------------------------

def test_the_poison_epoch_is_refused_everywhere():
    poison = 2**31 - 1
    for check, value in [
        (check_vote_request, VoteRequest(2, poison, 0, 0)),
        (check_vote_request, VoteRequest(2, 5, poison, 0)),
        (check_vote_response, VoteResponse(poison, False, NO_LEADER)),
        (check_fetch_request, ReplicaFetchRequest(2, poison, 0, 0, 1, 0)),
        (check_fetch_response, ReplicaFetchResponse(poison, 1, 0, FetchOutcome.NOT_LEADER)),
        (check_fetch_response, ReplicaFetchResponse(
            3, 1, 0, FetchOutcome.ENTRIES, (EntryHeader(0, poison, EntryKind.NOOP),))),
    ]:
        with pytest.raises(OutOfRangeFieldError) as refused:
            check(value)
        assert refused.value.value == poison and refused.value.high == EPOCH_MAX


def test_the_bounds_leave_room_for_a_pre_vote():
    assert check_vote_request(VoteRequest(2, EPOCH_MAX, EPOCH_MAX, INDEX_MAX))
    assert len(VoteRequest(2, EPOCH_MAX + 1, EPOCH_MAX, INDEX_MAX).encode()) == 22


@pytest.mark.parametrize("request_", [
    VoteRequest(-1, 1, 0, 0),
    VoteRequest(NODE_ID_MAX + 1, 1, 0, 0),
    VoteRequest(2, -1, 0, 0),
    VoteRequest(2, 1, 0, -1),
    VoteRequest(2, 1, 0, INDEX_MAX + 1),
])
def test_vote_requests_out_of_range(request_):
    with pytest.raises(OutOfRangeFieldError):
        check_vote_request(request_)


@pytest.mark.parametrize("request_", [
    ReplicaFetchRequest(2, 1, -1, 0, 1, 0),
    ReplicaFetchRequest(2, 1, 2**63 - 1, 0, 1, 0),
    ReplicaFetchRequest(2, 1, 0, -5, 1, 0),
    ReplicaFetchRequest(2, 1, 0, 0, 1, FETCH_WAIT_MS_MAX + 1),
    ReplicaFetchRequest(NODE_ID_MAX + 1, 1, 0, 0, 1, 0),
])
def test_fetch_requests_out_of_range(request_):
    with pytest.raises(OutOfRangeFieldError):
        check_fetch_request(request_)


@pytest.mark.parametrize("response", [
    ReplicaFetchResponse(3, -2, 0, FetchOutcome.NOT_LEADER),
    ReplicaFetchResponse(3, 1, -1, FetchOutcome.NOT_LEADER),
    ReplicaFetchResponse(3, 1, INDEX_MAX + 1, FetchOutcome.NOT_LEADER),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.DIVERGING, diverging_epoch=EPOCH_MAX + 1,
                         diverging_end=0),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.DIVERGING, diverging_epoch=1,
                         diverging_end=-7),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.ENTRIES,
                         (EntryHeader(-1, 1, EntryKind.NOOP),)),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.ENTRIES,
                         (EntryHeader(0, 1, EntryKind.SKIPPED, "t", PARTITIONS_MAX, 0, 1),)),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.ENTRIES,
                         (EntryHeader(0, 1, EntryKind.SKIPPED, "t", 0, 2**62, 1),)),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.ENTRIES,
                         (EntryHeader(0, 1, EntryKind.CREATE_TOPIC, "t", partitions=0),)),
    ReplicaFetchResponse(3, 1, 0, FetchOutcome.ENTRIES,
                         (EntryHeader(0, 1, EntryKind.CREATE_TOPIC, "t",
                                      partitions=PARTITIONS_MAX + 1),)),
])
def test_fetch_answers_out_of_range(response):
    with pytest.raises(OutOfRangeFieldError):
        check_fetch_response(response)


def test_answers_in_range_pass():
    assert check_vote_response(VoteResponse(3, True, NO_LEADER))
    assert check_fetch_response(ReplicaFetchResponse(
        3, 1, 2, FetchOutcome.ENTRIES,
        (EntryHeader(0, 1, EntryKind.CREATE_TOPIC, "t", partitions=PARTITIONS_MAX),
         EntryHeader(1, 3, EntryKind.SKIPPED, "t", PARTITIONS_MAX - 1, 10, 5))))
    assert check_fetch_response(ReplicaFetchResponse(3, NO_LEADER, 0, FetchOutcome.DIVERGING,
                                                     diverging_epoch=-1, diverging_end=-1))


def test_the_partition_bound_is_the_storage_bound():
    assert PARTITIONS_MAX == STORAGE_PARTITIONS_MAX
