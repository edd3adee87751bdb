"""Every API body: round trip, and every truncation or extension of it is refused."""

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.kaska import protocol as p
from common.kaska.errors import InvalidRequestError, InvalidResponseError, UnsupportedVersionError
from common.kaska.protocol import frames
from common.kaska.protocol.delete_records import PartitionDelete, PartitionDeleted
from common.kaska.protocol.metadata import BrokerInfo, PartitionInfo
from common.kaska.protocol.produce import ProducePrefix, read_prefix
from common.kaska.protocol.topic_id import TopicId
from common.kaska.record_batch import encode_batch

BATCH = encode_batch([b"one", b"two"], producer_id=bytes(range(16)), sequence=3,
                     timestamp_ms=99)

REQUESTS = [
    p.ProduceRequest("flights.c1", 3, -1, BATCH),
    p.FetchRequest("t", 0, 12345678901, 1 << 20, 500),
    p.ListOffsetsRequest("t", 7),
    p.MetadataRequest(()),
    p.MetadataRequest(("a", "b.c")),
    p.CreateTopicRequest("airports.x", 4),
    p.CreateTopicRequest("airports.x", 4, version=0),
    p.DeleteTopicRequest("t"),
    p.DeleteTopicRequest("t", TopicId(3, 12345678901)),
    p.ListTopicsRequest(True),
    p.ListTopicsRequest(False, version=0),
    p.MessageLengthRequest("t", 1, 42),
    p.CommitOffsetRequest("group-1", "t", 2, 17),
    p.FetchCommittedRequest("g", "t", 0),
    p.AuthenticateRequest(b"s3cret"),
    p.DeleteRecordsRequest("t", (PartitionDelete(0, 12345678901), PartitionDelete(3, -1)),
                           TopicId(3, 9)),
    p.DeleteRecordsRequest("t", (PartitionDelete(1023, 0),)),
]

RESPONSES = [
    p.ProduceResponse(100, 2, True),
    p.ListOffsetsResponse(5, 10),
    p.MetadataResponse((BrokerInfo(1, "127.0.0.1", 9092), BrokerInfo(2, "b2", 9093)),
                       {"t": (PartitionInfo(0, 1, 0), PartitionInfo(1, 2, 3)), "u": ()}),
    p.ListTopicsResponse({"a": 1, "b": 4}),
    p.MessageLengthResponse(300),
    p.FetchCommittedResponse(-1),
    p.DeleteRecordsResponse((PartitionDeleted(0, 0, 17), PartitionDeleted(2, 6, -1))),
    p.EmptyResponse(),
]

# A truncated produce or fetch response is a valid shorter body (their tail is raw bytes).
FIXED_REQUESTS = [r for r in REQUESTS if not isinstance(r, p.ProduceRequest)]


def _decode_request(request_type, body: bytes, version: int):
    """A request body as the broker decodes it: with the header's version when the API has
    more than one."""
    return request_type.decode(body, version) if version else request_type.decode(body)


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip(request_):
    version = getattr(request_, "version", frames.VERSION)
    assert _decode_request(type(request_), request_.encode(), version) == request_
    assert p.REQUEST_TYPES[request_.API] is type(request_)


# Version 1 answers of the topic APIs: each with the incarnations (topic ids).
VERSIONED_RESPONSES = [
    (p.ListTopicsResponse({"a": 1, "__offsets": 1},
                          {"a": TopicId(2, 40), "__offsets": None}), 1),
    (p.ListTopicsResponse({"a": 1, "b": 4}), 0),
    (p.CreateTopicResponse(TopicId(1, 7)), 1),
    (p.CreateTopicResponse(), 0),
]


@pytest.mark.parametrize(("response", "version"), VERSIONED_RESPONSES,
                         ids=lambda r: type(r).__name__)
def test_versioned_response_round_trip_and_truncations_refused(response, version):
    body = response.encode(version)
    assert type(response).decode(body, version) == response
    for cut in range(len(body)):
        with pytest.raises(InvalidResponseError):
            type(response).decode(body[:cut], version)
    with pytest.raises(InvalidResponseError):
        type(response).decode(body + b"\x00", version)


def test_a_version_1_delete_is_only_ever_read_with_its_incarnation():
    """The id is what keeps a retried delete off a re-created topic: a version 1 body
    without it, with half of it, with the no-id marker or a negative part is refused, never
    read as a delete of whatever incarnation is live."""
    named = p.DeleteTopicRequest("t", TopicId(3, 9)).encode()
    bare = p.DeleteTopicRequest("t").encode()
    for body in (bare, named[:-1], bare + struct.pack(">iq", -1, -1),
                 bare + struct.pack(">iq", -2, 9), bare + struct.pack(">iq", 3, -9)):
        with pytest.raises(InvalidRequestError):
            p.DeleteTopicRequest.decode(body, 1)
    with pytest.raises(InvalidRequestError):
        p.DeleteTopicRequest.decode(named, 0)  # version 0 has no id: 12 bytes too many


@pytest.mark.parametrize("request_type", [p.CreateTopicRequest, p.DeleteTopicRequest,
                                          p.ListTopicsRequest, p.DeleteRecordsRequest])
def test_topic_api_versions_beyond_ours_are_unsupported(request_type):
    with pytest.raises(UnsupportedVersionError):
        request_type.decode(b"", 2)


@pytest.mark.parametrize("response", RESPONSES, ids=lambda r: type(r).__name__)
def test_response_round_trip(response):
    assert type(response).decode(response.encode()) == response


def test_fetch_response_keeps_the_raw_batches():
    response = p.FetchResponse(10, 2, BATCH)
    decoded = p.FetchResponse.decode(response.encode())
    assert (decoded.high_watermark, decoded.log_start_offset) == (10, 2)
    assert bytes(decoded.records) == BATCH


@pytest.mark.parametrize("request_", FIXED_REQUESTS, ids=lambda r: type(r).__name__)
def test_every_truncation_and_extension_of_a_request_is_refused(request_):
    body = request_.encode()
    version = getattr(request_, "version", frames.VERSION)
    for cut in range(len(body)):
        with pytest.raises(InvalidRequestError):
            _decode_request(type(request_), body[:cut], version)
    with pytest.raises(InvalidRequestError):
        _decode_request(type(request_), body + b"\x00", version)


@pytest.mark.parametrize("response", RESPONSES[:-1], ids=lambda r: type(r).__name__)
def test_every_truncation_of_a_response_is_refused(response):
    body = response.encode()
    for cut in range(len(body)):
        with pytest.raises(InvalidResponseError):
            type(response).decode(body[:cut])


def test_produce_request_with_bad_acks_is_refused():
    body = p.ProduceRequest("t", 0, 1, BATCH).encode()
    bad = body.replace(struct.pack(">Ih", 0, 1), struct.pack(">Ih", 0, 5), 1)
    with pytest.raises(InvalidRequestError, match="acks"):
        p.ProduceRequest.decode(bad)


def test_produce_prefix_read_from_a_stream_leaves_the_batch_unread():
    prefix, batch = p.ProduceRequest("flights.c1", 3, -1, BATCH).encode_parts()
    stream = io.BytesIO(prefix + batch)
    assert read_prefix(stream.read) == ProducePrefix("flights.c1", 3, -1)
    assert stream.read() == BATCH


def test_produce_prefix_with_invalid_utf8_topic_is_refused():
    stream = io.BytesIO(b"\x00\x01\xff" + struct.pack(">Ih", 0, 1))
    with pytest.raises(InvalidRequestError, match="UTF-8"):
        read_prefix(stream.read)


def test_request_header_round_trip_and_length_counts_after_the_length_field():
    frame = frames.encode_request(p.Api.FETCH, 77, b"body")
    header = frames.decode_request_header(frame[:12])
    assert (header.api, header.version, header.correlation_id) == (p.Api.FETCH, 0, 77)
    assert header.length == len(frame) - 4 and header.body_bytes == 4


def test_request_header_shorter_than_itself_is_refused():
    with pytest.raises(InvalidRequestError, match="below"):
        frames.decode_request_header(struct.pack(">IHHI", 7, 0, 0, 0))


def test_response_header_round_trip():
    raw = frames.encode_response_header(5, 42, 10)
    header = frames.decode_response_header(raw)
    assert (header.correlation_id, header.error_code, header.body_bytes) == (5, 42, 10)


def test_error_body_carries_message_and_leader_hint():
    body = frames.ErrorBody("not me", "h2:9093")
    assert frames.ErrorBody.decode(body.encode()) == body


def test_only_replication_apis_use_the_replication_numbers():
    assert {api for api in p.Api if api in frames.REPLICATION_APIS_RESERVED} == \
        frames.REPLICATION_APIS == {p.Api.VOTE, p.Api.REPLICA_FETCH, p.Api.SNAPSHOT_FETCH}


@settings(max_examples=300, deadline=None)
@given(api=st.sampled_from(sorted(p.REQUEST_TYPES)), body=st.binary(max_size=64))
def test_random_bodies_are_refused_or_decode_to_their_exact_encoding(api, body):
    try:
        decoded = p.REQUEST_TYPES[api].decode(body)
    except InvalidRequestError:
        return  # refused: the only acceptable failure
    assert decoded.encode() == body
