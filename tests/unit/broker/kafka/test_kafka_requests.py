"""One request frame in, one answer out (services/broker/kafka/requests.py, framing.py): version
negotiation, unsupported and garbage requests. No handler runs here that needs a broker."""

import struct
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from services.broker.kafka import api_versions, requests
from services.broker.kafka.dispatch import API_SPECS
from services.broker.kafka.errors import (
    INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
    MalformedRequestError,
)
from services.broker.kafka.framing import encode_response, frame_size, parse_fixed_header
from services.broker.metrics import BrokerCounters


def counted(counters: BrokerCounters | None = None) -> SimpleNamespace:
    """A KafkaContext stand-in for handlers that read nothing but the broker's counters."""
    return SimpleNamespace(broker=SimpleNamespace(metrics=counters or BrokerCounters()))


def kafka_counts(counters: BrokerCounters) -> dict[tuple[str, str], int]:
    return counters.snapshot().kafka_requests


def request_frame(request, correlation_id=7) -> bytes:
    """The frame after its size, as a client sends it."""
    request.with_header(correlation_id=correlation_id, client_id="test")
    return bytes(request.encode(header=True))


def split_answer(answer: bytes) -> tuple[int, bytes]:
    """(correlation id, what follows it) of a non-flexible answer, checking its size."""
    assert frame_size(answer[:4]) == len(answer) - 4
    return struct.unpack_from(">i", answer, 4)[0], answer[8:]


@pytest.mark.parametrize("version", range(5))
def test_api_versions_answers_every_version_we_offer(version):
    answer = requests.answer(counted(), request_frame(
        ApiVersionsRequest[version](client_software_name="t", client_software_version="1")))
    correlation_id, body = split_answer(answer)
    response = ApiVersionsResponse.decode(body, version=version)
    assert correlation_id == 7 and response.error_code == 0
    offered = {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}
    assert offered == api_versions.SUPPORTED


def test_newer_api_versions_gets_the_v0_list_and_unsupported_version():
    frame = bytearray(request_frame(ApiVersionsRequest[3](client_software_name="t",
                                                           client_software_version="1")))
    struct.pack_into(">h", frame, 2, 9)  # a version from the future
    correlation_id, body = split_answer(requests.answer(counted(), bytes(frame)))
    response = ApiVersionsResponse.decode(body, version=0)
    assert correlation_id == 7 and response.error_code == 35
    assert {key.api_key for key in response.api_keys} == set(api_versions.SUPPORTED)


@pytest.mark.parametrize("api_key, version", [(4, 0), (1000, 0), (-1, 0), (3, 0), (3, 10),
                                              (0, 2), (1, 13)])
def test_unsupported_api_or_version_answers_unsupported_version(api_key, version):
    frame = struct.pack(">hhi", api_key, version, 99) + b"\x00\x00rest"
    correlation_id, body = split_answer(requests.answer(counted(), frame))
    assert (correlation_id, body) == (99, struct.pack(">h", 35))


def test_garbage_body_answers_invalid_request():
    frame = request_frame(MetadataRequest[9](topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
    # Claim a topic array of 2^20 entries that the frame does not hold.
    garbled = frame[:-4] + b"\xff\xff\xff\x7f"
    correlation_id, body = split_answer(requests.answer(counted(), garbled))
    assert (correlation_id, body) == (7, struct.pack(">h", INVALID_REQUEST))


def test_frame_shorter_than_a_header_is_malformed():
    with pytest.raises(MalformedRequestError):
        parse_fixed_header(b"\x00\x12\x00")


def test_flexible_answers_carry_empty_tagged_fields():
    assert encode_response(5, b"body", flexible_header=True) == \
        struct.pack(">ii", 9, 5) + b"\x00body"
    assert encode_response(5, b"body", flexible_header=False) == struct.pack(">ii", 8, 5) + \
        b"body"


SUPPORTED_PAIRS = [(key, version) for key, (low, high) in api_versions.SUPPORTED.items()
                   for version in range(low, high + 1)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SUPPORTED_PAIRS), st.binary(max_size=200))
def test_decoders_fail_only_with_the_errors_we_catch(pair, garbage):
    api_key, version = pair
    frame = struct.pack(">hhi", api_key, version, 1) + garbage
    try:
        API_SPECS[api_key].request_class.decode(frame, version=version, header=True)
    except requests.DECODE_ERRORS:
        pass  # answered INVALID_REQUEST; anything else would escape to the blind handler


def test_every_answer_is_counted_by_api_and_outcome():
    counters = BrokerCounters()
    ok = request_frame(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"))
    requests.answer(counted(counters), ok)
    requests.answer(counted(counters), struct.pack(">hhi", 1000, 0, 99) + b"rest")
    garbled = request_frame(MetadataRequest[9](topics=None, allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False))
    requests.answer(counted(counters), garbled[:-4] + b"\xff\xff\xff\x7f")
    assert kafka_counts(counters) == {("ApiVersions", "ok"): 1,
                                      ("unknown", "unsupported_version"): 1,
                                      ("Metadata", "invalid_request"): 1}


def test_a_handler_bug_costs_its_request_and_is_counted(monkeypatch):
    def broken(kctx, request):
        raise RuntimeError("a bug")

    spec = API_SPECS[api_versions.METADATA]
    monkeypatch.setitem(API_SPECS, api_versions.METADATA, type(spec)(spec.request_class, broken))
    counters = BrokerCounters()
    frame = request_frame(MetadataRequest[9](topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
    correlation_id, body = split_answer(requests.answer(counted(counters), frame))
    assert (correlation_id, body) == (7, struct.pack(">h", UNKNOWN_SERVER_ERROR))
    assert kafka_counts(counters) == {("Metadata", "internal_error"): 1}
