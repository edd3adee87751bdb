"""The edges of services/broker/replication/wire/peer_auth.py that test_peer_frames.py does not
reach: every stamp field at the ends of its wire width, the trailer's byte layout (what a broker
of another build reads), frames that hold nothing but their trailer, and the stamp as a value."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from common.kaska.protocol.frames import VERSION, Api
from services.broker.replication.wire.peer_auth import (
    ANSWER_TRAILER_BYTES,
    REQUEST_TRAILER_BYTES,
    AnswerMac,
    RequestStamp,
    TruncatedPeerFrameError,
    open_answer,
    open_request,
    request_trailer,
)
from services.broker.replication.wire.vote import VoteRequest

SECRET = b"cluster-secret"
STAMP = RequestStamp(sender=2, receiver=1, incarnation=7, counter=41, sent_at_ms=1_700_000_000,
                     cluster_id="kaska-test", data_incarnation=99, learner=False, group=3)
BODY = VoteRequest(2, 5, 4, 100).encode()

# The widths of the request trailer's numbers (the module docstring's layout), written out here
# rather than read from the module, so a wrong bound in the module cannot agree with itself.
FIELD_MAX = {
    "sender": 2**32 - 1,
    "receiver": 2**32 - 1,
    "incarnation": 2**64 - 1,
    "counter": 2**64 - 1,
    "sent_at_ms": 2**64 - 1,
    "data_incarnation": 2**64 - 1,
    "group": 2**16 - 1,
}
# body | u32 sender | u32 receiver | u64 incarnation | u64 counter | u64 sent_at_ms
#      | cluster_id[32] | u64 data_incarnation | u8 learner | u16 group | tag[32]
REQUEST_LAYOUT = struct.Struct(">IIQQQ32sQBH")
# body | u32 responder | cluster_id[32] | u64 data_incarnation | tag[32]
ANSWER_LAYOUT = struct.Struct(">I32sQ")


def signed(stamp: RequestStamp, body: bytes = BODY) -> bytes:
    return body + request_trailer(SECRET, Api.VOTE, VERSION, (body,), stamp)


@pytest.mark.parametrize("field, value", [(field, value) for field, high in FIELD_MAX.items()
                                          for value in (0, high)])
def test_every_stamp_field_signs_and_opens_at_both_ends_of_its_width(field, value):
    """Node id 0, a counter that has reached 2**64 - 1, group 65535...: a frame a broker signed
    with any in-range number opens to the same stamp, and so does an answer bound to it; refusing
    one would cut a good peer off (an AssertionError out of the receiver, not even a refusal)."""
    stamp = dataclasses.replace(STAMP, **{field: value})
    opened, body = open_request(SECRET, Api.VOTE, VERSION, signed(stamp))
    assert opened == stamp
    assert bytes(body) == BODY
    mac = AnswerMac(SECRET, Api.VOTE, opened)
    mac.update(b"answer")
    answer = b"answer" + mac.trailer(1, STAMP.cluster_id, 5)
    assert bytes(open_answer(SECRET, Api.VOTE, stamp, 1, answer)) == b"answer"


@pytest.mark.parametrize("field, value", [(field, value) for field, high in FIELD_MAX.items()
                                          for value in (-1, high + 1)])
def test_a_stamp_that_does_not_fit_its_wire_width_fails_where_it_is_made(field, value):
    """A stamp is made by this broker (PeerSigner.stamp) from its own numbers: one that does not
    fit is a programmer's error, stopped at the RequestStamp rather than later as a struct.error
    in the middle of signing or of binding an answer."""
    with pytest.raises(AssertionError):
        dataclasses.replace(STAMP, **{field: value})


def test_the_request_trailer_is_laid_out_as_documented():
    """What a broker of another build parses: the stamp's fields in order, the cluster id NUL
    padded to 32 bytes (a 32-character id whole), the learner flag as the byte 1, then the tag."""
    cluster_id = "c" * 32
    stamp = dataclasses.replace(STAMP, cluster_id=cluster_id, learner=True)
    trailer = request_trailer(SECRET, Api.VOTE, VERSION, (BODY,), stamp)
    assert len(trailer) == REQUEST_LAYOUT.size + 32 == REQUEST_TRAILER_BYTES
    assert REQUEST_LAYOUT.unpack(trailer[:-32]) == (
        2, 1, 7, 41, 1_700_000_000, cluster_id.encode(), 99, 1, 3)
    assert REQUEST_LAYOUT.unpack(request_trailer(SECRET, Api.VOTE, VERSION, (BODY,), STAMP)[:-32])[
        5:] == (b"kaska-test" + b"\0" * 22, 99, 0, 3)


def test_a_learners_full_length_cluster_id_survives_the_wire():
    stamp = dataclasses.replace(STAMP, cluster_id="c" * 32, learner=True)
    opened, _ = open_request(SECRET, Api.VOTE, VERSION, signed(stamp))
    assert opened.cluster_id == "c" * 32
    assert opened.learner is True


def test_a_stamp_that_names_no_identity_is_a_voter_of_no_cluster_and_data_incarnation_0():
    """The identity fields' defaults: a stamp made before its group learnt its identity speaks as
    a voting member (learner byte 0) of data incarnation 0, and says so on the wire."""
    stamp = RequestStamp(sender=2, receiver=1, incarnation=7, counter=41, sent_at_ms=5)
    assert (stamp.cluster_id, stamp.data_incarnation, stamp.learner, stamp.group) == \
        ("", 0, False, 0)
    packed = request_trailer(SECRET, Api.VOTE, VERSION, (BODY,), stamp)[:-32]
    assert REQUEST_LAYOUT.unpack(packed)[5:] == (b"\0" * 32, 0, 0, 0)


def test_the_answer_trailer_is_laid_out_as_documented():
    """responder, cluster id (NUL padded), data incarnation, tag; without a data incarnation the
    trailer carries 0, like a stamp without one."""
    mac = AnswerMac(SECRET, Api.VOTE, STAMP)
    mac.update(b"answer")
    trailer = mac.trailer(1, "kaska-test", 77)
    assert len(trailer) == ANSWER_LAYOUT.size + 32 == ANSWER_TRAILER_BYTES
    assert ANSWER_LAYOUT.unpack(trailer[:-32]) == (1, b"kaska-test" + b"\0" * 22, 77)
    assert ANSWER_LAYOUT.unpack(mac.trailer(1)[:-32]) == (1, b"\0" * 32, 0)


def test_a_request_that_is_only_its_trailer_opens_to_an_empty_body():
    """The length check's boundary: exactly REQUEST_TRAILER_BYTES is a signed, empty body; one
    byte fewer cannot hold the trailer."""
    frame = request_trailer(SECRET, Api.VOTE, VERSION, (), STAMP)
    assert len(frame) == REQUEST_TRAILER_BYTES
    opened, body = open_request(SECRET, Api.VOTE, VERSION, frame)
    assert opened == STAMP
    assert bytes(body) == b""
    with pytest.raises(TruncatedPeerFrameError):
        open_request(SECRET, Api.VOTE, VERSION, frame[1:])


def test_an_answer_that_is_only_its_trailer_opens_to_an_empty_body():
    frame = AnswerMac(SECRET, Api.VOTE, STAMP).trailer(1, STAMP.cluster_id, 5)
    assert len(frame) == ANSWER_TRAILER_BYTES
    assert bytes(open_answer(SECRET, Api.VOTE, STAMP, 1, frame)) == b""
    with pytest.raises(TruncatedPeerFrameError):
        open_answer(SECRET, Api.VOTE, STAMP, 1, frame[1:])


def test_a_stamp_is_an_immutable_hashable_value():
    """A verified stamp is handed on (to the replay guard; PeerLink hands the one it signed to
    the reader thread that checks the answer): nobody may change it after the MAC was checked."""
    stamp, _ = open_request(SECRET, Api.VOTE, VERSION, signed(STAMP))
    with pytest.raises(dataclasses.FrozenInstanceError):
        stamp.counter = 42  # type: ignore[misc]
    assert stamp.counter == 41
    assert hash(stamp) == hash(dataclasses.replace(STAMP))
