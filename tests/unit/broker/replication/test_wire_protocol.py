"""The replication wire (services/broker/replication/wire/: VOTE, REPLICA_FETCH) and their
errors: round trips, and every malformed body refused with the reader's error instead of a
crash or a large allocation."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.kaska import protocol as p
from common.kaska.errors import (
    InvalidRequestError,
    InvalidResponseError,
    KaskaError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetNotAvailableError,
    StaleEpochError,
    UnknownReplicaError,
    error_for_code,
)
from common.kaska.protocol.frames import ErrorBody
from common.kaska.protocol.metadata import NO_LEADER
from common.kaska.range_reader import RangeReader
from common.kaska.record_batch import encode_batch
from services.broker.replication import wire
from services.broker.replication.wire.replica_fetch import (
    ENTRY_HEADER_BYTES_MIN,
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.vote import VoteRequest, VoteResponse

# A fixed timestamp: the responses' reprs are test ids, which must be the same in every
# pytest-xdist worker's collection.
BATCHED_AT_MS = 1_700_000_000_000
BATCH_A = encode_batch([b"one", b"two"], producer_id=bytes(range(16)), sequence=0,
                       timestamp_ms=BATCHED_AT_MS)
BATCH_B = encode_batch([b"three"], producer_id=bytes(range(16)), sequence=1,
                       timestamp_ms=BATCHED_AT_MS)

ENTRIES = (
    EntryHeader(0, 1, EntryKind.NOOP),
    EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "flights.c1", partitions=4),
    EntryHeader(2, 1, EntryKind.BATCH, "flights.c1", 3, 0, 2, data_bytes=len(BATCH_A)),
    EntryHeader(3, 2, EntryKind.SKIPPED, "flights.c1", 3, 2, 5),
    EntryHeader(4, 2, EntryKind.BATCH, "flights.c1", 3, 7, 1, data_bytes=len(BATCH_B)),
    EntryHeader(5, 2, EntryKind.DELETE_TOPIC, "old"),
)
WITH_ENTRIES = ReplicaFetchResponse(2, 1, 3, FetchOutcome.ENTRIES, ENTRIES, BATCH_A + BATCH_B)

REQUESTS = [
    VoteRequest(2, 7, 6, 12345678901),
    VoteRequest(3, 8, 6, 0, pre_vote=True),
    VoteRequest(3, 9, 8, 40, transfer=True),
    ReplicaFetchRequest(3, 7, 42, 6, 1 << 20, 500),
]

RESPONSES = [
    VoteResponse(7, True, 2),
    VoteResponse(8, False, NO_LEADER),
    VoteResponse(9, True, NO_LEADER, pre_vote=True),
    WITH_ENTRIES,
    ReplicaFetchResponse(2, 1, 3, FetchOutcome.ENTRIES),  # caught up: no entries
    ReplicaFetchResponse(3, 2, 9, FetchOutcome.DIVERGING, diverging_epoch=1,
                         diverging_end=17),
    ReplicaFetchResponse(4, NO_LEADER, -1, FetchOutcome.NOT_LEADER),
    ReplicaFetchResponse(5, 1, 12, FetchOutcome.TIMEOUT_NOW),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip_and_registration(request_):
    assert type(request_).decode(request_.encode()) == request_
    assert wire.PEER_REQUEST_TYPES[request_.API] is type(request_)


@pytest.mark.parametrize("response", RESPONSES, ids=repr)
def test_response_round_trip(response):
    assert type(response).decode(response.encode()) == response


def test_response_types_are_registered():
    assert wire.PEER_RESPONSE_TYPES[p.Api.VOTE] is VoteResponse
    assert wire.PEER_RESPONSE_TYPES[p.Api.REPLICA_FETCH] is ReplicaFetchResponse


def test_decoded_enums_are_enum_members():
    decoded = ReplicaFetchResponse.decode(WITH_ENTRIES.encode())
    assert decoded.outcome is FetchOutcome.ENTRIES
    assert [entry.kind for entry in decoded.entries] == [entry.kind for entry in ENTRIES]
    assert all(isinstance(entry.kind, EntryKind) for entry in decoded.entries)


def test_prefix_is_everything_before_the_data_section():
    # The broker sends the prefix, then the batches with sendfile: together the whole answer.
    prefix = WITH_ENTRIES.encode_prefix()
    assert prefix + BATCH_A + BATCH_B == WITH_ENTRIES.encode()
    # Built without the data (as the broker does), the prefix is the same.
    assert ReplicaFetchResponse(2, 1, 3, FetchOutcome.ENTRIES, ENTRIES).encode_prefix() == prefix


def test_batches_split_the_data_section_by_entry():
    decoded = ReplicaFetchResponse.decode(WITH_ENTRIES.encode())
    pieces = [(entry.index, bytes(data)) for entry, data in decoded.batches()]
    assert pieces == [(0, b""), (1, b""), (2, BATCH_A), (3, b""), (4, BATCH_B), (5, b"")]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_truncation_and_extension_of_a_request_is_refused(request_):
    body = request_.encode()
    for cut in range(len(body)):
        with pytest.raises(InvalidRequestError):
            type(request_).decode(body[:cut])
    with pytest.raises(InvalidRequestError):
        type(request_).decode(body + b"\x00")


@pytest.mark.parametrize("response", RESPONSES, ids=repr)
def test_every_truncation_of_a_response_is_refused(response):
    body = response.encode()
    for cut in range(len(body)):
        with pytest.raises(InvalidResponseError):
            type(response).decode(body[:cut])


@pytest.mark.parametrize("response", RESPONSES, ids=repr)
def test_trailing_bytes_after_a_response_are_refused(response):
    # For ENTRIES the extra byte lands in the data section: it no longer matches data_bytes.
    with pytest.raises(InvalidResponseError):
        type(response).decode(response.encode() + b"\x00")


def test_data_section_shorter_or_longer_than_announced_is_refused():
    prefix = WITH_ENTRIES.encode_prefix()
    for data in (BATCH_A, BATCH_A + BATCH_B[:-1], BATCH_A + BATCH_B + BATCH_B, b""):
        with pytest.raises(InvalidResponseError, match="data bytes"):
            ReplicaFetchResponse.decode(prefix + data)


def test_absurd_entry_count_is_refused_before_allocating():
    body = struct.pack(">iiqBI", 2, 1, 3, FetchOutcome.ENTRIES, 0xFFFFFFFF)
    with pytest.raises(InvalidResponseError, match="announces"):
        ReplicaFetchResponse.decode(body + bytes(ENTRY_HEADER_BYTES_MIN * 3))


def test_unknown_outcome_or_kind_is_refused():
    with pytest.raises(InvalidResponseError, match="outcome"):
        ReplicaFetchResponse.decode(struct.pack(">iiqB", 2, 1, 3, 9))
    noop = ReplicaFetchResponse(2, 1, 3, FetchOutcome.ENTRIES, (ENTRIES[0],)).encode()
    kind_at = 4 + 4 + 8 + 1 + 4 + 8 + 4
    bad = noop[:kind_at] + b"\x07" + noop[kind_at + 1:]
    with pytest.raises(InvalidResponseError, match="kind"):
        ReplicaFetchResponse.decode(bad)


def test_data_bytes_on_an_entry_that_is_no_batch_is_refused():
    skipped = EntryHeader(3, 2, EntryKind.SKIPPED, "t", data_bytes=len(BATCH_A))
    body = ReplicaFetchResponse(2, 1, 3, FetchOutcome.ENTRIES, (skipped,), BATCH_A).encode()
    with pytest.raises(InvalidResponseError, match="SKIPPED"):
        ReplicaFetchResponse.decode(body)


def test_vote_granted_flag_other_than_0_or_1_is_refused():
    with pytest.raises(InvalidResponseError, match="granted"):
        VoteResponse.decode(struct.pack(">iBi", 7, 2, 1))


def test_inconsistent_responses_are_not_encoded():
    with pytest.raises(ValueError):
        ReplicaFetchResponse(2, 1, 3, FetchOutcome.ENTRIES, ENTRIES, BATCH_A).encode()
    with pytest.raises(ValueError):
        ReplicaFetchResponse(2, 1, 3, FetchOutcome.NOT_LEADER, ENTRIES[:1]).encode_prefix()


@pytest.mark.parametrize("error, code, retriable", [
    (UnknownReplicaError, 47, False),
    (StaleEpochError, 48, False),
    (OffsetNotAvailableError, 49, True),
    (NotEnoughReplicasError, 19, True),
])
def test_replication_errors_round_trip_their_codes(error, code, retriable):
    assert (error.code, error.retriable) == (code, retriable)
    assert error_for_code(code) is error


def test_errors_carry_no_leader_and_no_delivery_doubt_by_default():
    error = KaskaError()
    assert error.leader == "" and error.maybe_delivered is False
    assert ErrorBody.from_error(NotLeaderError("moved")) == ErrorBody("moved", "")
    hinted = NotLeaderError("moved")
    hinted.leader = "h2:9093"
    assert ErrorBody.from_error(hinted) == ErrorBody("moved", "h2:9093")
    assert KaskaError.leader == ""  # setting it on an instance leaves the class alone


def test_range_reader_waits_out_an_offset_not_yet_committed():
    # Right after a failover the new leader refuses offsets above its high watermark.
    class Cluster:
        request_timeout_s = 1.0
        answers = [OffsetNotAvailableError("above the high watermark"),
                   p.FetchResponse(2, 0, BATCH_A)]

        def call(self, request, **_):
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    pauses = []
    reader = RangeReader("unused:1", cluster=Cluster(), sleep=pauses.append)
    assert [record.value for record in reader.read("t", 0, 0, 2)] == [b"one", b"two"]
    assert len(pauses) == 1 and pauses[0] > 0


@settings(max_examples=300, deadline=None)
@given(api=st.sampled_from(sorted(wire.PEER_REQUEST_TYPES)), body=st.binary(max_size=64))
def test_random_bodies_are_refused_or_decode_to_their_exact_encoding(api, body):
    """The replication requests' part of test_protocol_apis.py's test of the same name (the
    client APIs' registry no longer holds them)."""
    try:
        decoded = wire.PEER_REQUEST_TYPES[api].decode(body)
    except InvalidRequestError:
        return  # refused: the only acceptable failure
    assert decoded.encode() == body
