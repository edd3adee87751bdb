"""Bad input on the Kafka listener: every frame whose size can be trusted gets an error answer
and the connection stays usable; oversized and undersized frames close the connection; the
broker serves on through all of it."""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.integration.broker.broker_process import closed_by_peer
from tests.integration.kafka.clients import create_topic
from tests.integration.kafka.kafka_broker import kafka_request, recv_exactly
from tests.integration.metrics_scrape import scrape
from tests.unit.broker.kafka.kafka_batches import kafka_batch

pytestmark = pytest.mark.integration

UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
MESSAGE_TOO_LARGE = 10
CORRUPT_MESSAGE = 2
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43


def corrupt(batch: bytes) -> bytearray:
    flipped = bytearray(batch)
    flipped[-1] ^= 0xFF  # a record byte: the CRC no longer holds
    return flipped


def connect(broker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10)


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """(correlation id, rest) of one non-flexible answer."""
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    frame = recv_exactly(sock, size)
    return struct.unpack_from(">i", frame)[0], frame[4:]


def still_serves(broker) -> None:
    response = kafka_request(broker.kafka_address, ApiVersionsRequest[3](
        client_software_name="t", client_software_version="1"))
    assert response.error_code == 0 and broker.alive()


def kafka_answers(broker, api: str, outcome: str) -> float:
    """kaska_kafka_requests_total{api, outcome} of the broker's /metrics (0 before any)."""
    _text, samples = scrape(broker.metrics_port)
    labels = (("api", api), ("outcome", outcome))
    return samples.get(("kaska_kafka_requests_total", labels), 0.0)


def test_garbage_unknown_apis_and_versions_get_errors_on_one_connection(kafka_broker):
    counted = [("Metadata", "invalid_request"), ("unknown", "unsupported_version"),
               ("Produce", "unsupported_version"), ("Metadata", "ok")]
    before = {key: kafka_answers(kafka_broker, *key) for key in counted}
    with connect(kafka_broker) as sock:
        send_frame(sock, struct.pack(">hhi", 3, 9, 11) + b"\xff" * 40)  # Metadata v9, garbage
        assert read_answer(sock) == (11, struct.pack(">h", INVALID_REQUEST))
        send_frame(sock, struct.pack(">hhi", 999, 0, 12) + b"\x00\x00")  # unknown api key
        assert read_answer(sock) == (12, struct.pack(">h", UNSUPPORTED_VERSION))
        send_frame(sock, struct.pack(">hhi", 0, 1, 13) + b"\x00\x00")  # Produce v1: too old
        assert read_answer(sock) == (13, struct.pack(">h", UNSUPPORTED_VERSION))
        # The same connection then serves a real request.
        request = MetadataRequest[9](topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        request.with_header(correlation_id=14, client_id="t")
        sock.sendall(request.encode(header=True, framed=True))
        correlation_id, _rest = read_answer(sock)
        assert correlation_id == 14
    # Each answered, each counted under its api and outcome.
    assert {key: kafka_answers(kafka_broker, *key) - before[key] for key in counted} == {
        key: 1 for key in counted}
    still_serves(kafka_broker)


def test_oversized_request_is_answered_and_closed_unread(kafka_broker):
    with connect(kafka_broker) as sock:
        # Announce 2 GiB - 1, send only the header: the broker must not wait for (or allocate)
        # the rest.
        sock.sendall(struct.pack(">ihhi", 2**31 - 1, 0, 9, 21))
        assert read_answer(sock) == (21, struct.pack(">h", MESSAGE_TOO_LARGE))
        assert closed_by_peer(sock)
    still_serves(kafka_broker)


@pytest.mark.parametrize("size", [0, 3, -5])
def test_frame_too_small_for_a_header_closes(kafka_broker, size):
    with connect(kafka_broker) as sock:
        sock.sendall(struct.pack(">i", size) + b"\x00" * 3)
        assert closed_by_peer(sock)
    still_serves(kafka_broker)


def test_truncated_frame_then_hang_up(kafka_broker):
    with connect(kafka_broker) as sock:
        sock.sendall(struct.pack(">i", 100) + struct.pack(">hhi", 18, 3, 1))
    still_serves(kafka_broker)


@pytest.mark.parametrize("records, code", [
    (b"\x00" * 70, UNSUPPORTED_FOR_MESSAGE_FORMAT),  # magic 0
    (bytes(corrupt(kafka_batch([(None, b"v", [])]))), CORRUPT_MESSAGE),
])
def test_bad_batch_is_refused_per_partition(kafka_broker, topic_name, records, code):
    create_topic(kafka_broker.kafka_address, topic_name, 1)
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        Topic(name=topic_name, partition_data=[
            Topic.PartitionProduceData(index=0, records=records)])])
    response = kafka_request(kafka_broker.kafka_address, request)
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == code and answer.base_offset == -1
    still_serves(kafka_broker)
