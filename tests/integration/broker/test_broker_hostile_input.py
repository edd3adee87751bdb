"""Hostile frames at a live broker: each is answered with an error or a closed connection,
and the broker keeps serving correct data afterwards."""

import os
import struct

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import (
    AuthenticationError,
    CorruptBatchError,
    FrameTooLargeError,
    InvalidRequestError,
    InvalidTopicError,
    UnsupportedVersionError,
)
from common.kaska.protocol import (
    Api,
    CreateTopicRequest,
    ErrorBody,
    FetchRequest,
    ListTopicsRequest,
    ListTopicsResponse,
    ProduceRequest,
    ProduceResponse,
)
from common.kaska.protocol.codec import BodyWriter
from common.kaska.record_batch import encode_batch
from tests.integration.broker.broker_process import (
    CLIENT_OPTIONS,
    closed_by_peer,
    frame_header,
    raw_connect,
    read_answer,
    send_request,
)

pytestmark = pytest.mark.integration

FRAME_BYTES_MAX = 1024 * 1024


@pytest.fixture(scope="module")
def small_frames_broker(tmp_path_factory):
    from tests.integration.broker.broker_process import BrokerProcess

    process = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data",
                            "--frame-bytes-max", str(FRAME_BYTES_MAX)).start()
    yield process
    process.kill()


@pytest.fixture
def sock(small_frames_broker):
    connection = raw_connect(small_frames_broker)
    yield connection
    connection.close()


def _still_serves(broker, topic):
    """A full round trip on a fresh topic: the broker is alive and its data is right."""
    with Admin(broker.address, **CLIENT_OPTIONS) as admin, \
            Producer(broker.address, **CLIENT_OPTIONS) as producer, \
            Consumer(broker.address, **CLIENT_OPTIONS) as consumer:
        admin.create_topic(topic)
        producer.send_batch(topic, 0, [b"still", b"fine"])
        consumer.seek(topic, 0)
        assert [consumer.poll(5).value for _ in range(2)] == [b"still", b"fine"]
    return True


def _list_topics_works(sock, correlation_id=50):
    send_request(sock, Api.LIST_TOPICS, ListTopicsRequest().encode(), correlation_id)
    answer = read_answer(sock)
    assert answer is not None and answer[:2] == (correlation_id, 0)
    return ListTopicsResponse.decode(answer[2])


def _error(answer):
    assert answer is not None, "expected an error answer, the connection was closed"
    return answer[1], ErrorBody.decode(answer[2]).message


def test_oversized_frame_is_answered_and_closed_without_being_read(small_frames_broker, sock,
                                                                   topic_name):
    sock.sendall(frame_header(FRAME_BYTES_MAX + 100, Api.PRODUCE))  # body never sent
    code, message = _error(read_answer(sock))
    assert code == FrameTooLargeError.code and "frame_bytes_max" in message
    assert closed_by_peer(sock)
    assert _still_serves(small_frames_broker, topic_name)


def test_control_body_over_its_bound_is_refused_unread_and_closed(broker):
    # The shared broker takes 64 MiB frames, but a LIST_TOPICS body above 1 MiB is refused
    # before anything of it is read into memory.
    connection = raw_connect(broker)
    try:
        connection.sendall(frame_header(8 + 2 * 1024 * 1024, Api.LIST_TOPICS))
        code, message = _error(read_answer(connection))
        assert code == FrameTooLargeError.code and "at most" in message
        assert closed_by_peer(connection)
    finally:
        connection.close()


def test_unknown_api_is_answered_and_the_connection_stays_usable(sock):
    send_request(sock, 999, b"whatever", correlation_id=7)
    answer = read_answer(sock)
    assert answer[0] == 7
    assert _error(answer)[0] == InvalidRequestError.code
    # REPLICA_FETCH, unsigned: refused by the peer gate, and the connection stays usable.
    send_request(sock, 33, b"", correlation_id=8)
    assert _error(read_answer(sock))[0] == AuthenticationError.code
    assert _list_topics_works(sock) is not None


def test_unknown_version_is_answered(sock):
    send_request(sock, Api.LIST_TOPICS, ListTopicsRequest().encode(), version=9)
    assert _error(read_answer(sock))[0] == UnsupportedVersionError.code
    assert _list_topics_works(sock) is not None


@pytest.mark.parametrize("body", [
    b"",                                   # nothing at all
    b"\x00\x05ab",                         # string longer than the body
    b"\x00\x01t\x00\x00",                  # ends inside partition
    b"\x00\x01t" + bytes(20) + b"extra",   # trailing bytes
    b"\x00\x02\xc3\x28" + bytes(20),       # invalid UTF-8
])
def test_malformed_fetch_bodies_are_answered(sock, body):
    send_request(sock, Api.FETCH, body)
    assert _error(read_answer(sock))[0] == InvalidRequestError.code
    assert _list_topics_works(sock) is not None


def test_frame_length_below_the_header_closes(sock):
    sock.sendall(struct.pack(">IHHI", 3, 0, 0, 1))
    assert closed_by_peer(sock)


def test_client_vanishing_mid_frame_does_not_hurt_the_broker(small_frames_broker, topic_name):
    for partial in (frame_header(100, Api.LIST_TOPICS)[:5],
                    frame_header(100, Api.CREATE_TOPIC) + b"\x00\x10abc",
                    frame_header(8 + 2 + 1 + 6 + 5000, Api.PRODUCE) + b"\x00\x01x"
                    + struct.pack(">Ih", 0, 1) + b"\x00" * 100):
        connection = raw_connect(small_frames_broker)
        connection.sendall(partial)
        connection.close()
    assert _still_serves(small_frames_broker, topic_name)


def test_bad_crc_is_answered_and_nothing_is_stored(small_frames_broker, sock, topic_name):
    send_request(sock, Api.CREATE_TOPIC, CreateTopicRequest(topic_name, 1).encode())
    assert read_answer(sock)[1] == 0
    batch = bytearray(encode_batch([b"payload"]))
    batch[-1] ^= 0xFF
    send_request(sock, Api.PRODUCE, ProduceRequest(topic_name, 0, 1, bytes(batch)).encode(), 2)
    assert _error(read_answer(sock))[0] == CorruptBatchError.code
    good = encode_batch([b"good"])
    send_request(sock, Api.PRODUCE, ProduceRequest(topic_name, 0, 1, good).encode(), 3)
    answer = read_answer(sock)
    assert answer[1] == 0 and ProduceResponse.decode(answer[2]).base_offset == 0


@pytest.mark.parametrize("batch", [b"", b"short", bytes(200)], ids=["empty", "short", "zeros"])
def test_garbage_batches_are_answered(sock, topic_name, batch):
    send_request(sock, Api.CREATE_TOPIC, CreateTopicRequest(topic_name, 1).encode())
    assert read_answer(sock)[1] == 0
    send_request(sock, Api.PRODUCE, ProduceRequest(topic_name, 0, 1, batch).encode(), 2)
    assert _error(read_answer(sock))[0] == CorruptBatchError.code
    assert _list_topics_works(sock) is not None


def test_produce_to_a_missing_topic_drains_the_batch_and_keeps_the_connection(sock):
    batch = encode_batch([b"x" * 100_000])
    send_request(sock, Api.PRODUCE, ProduceRequest("missing", 0, 1, batch).encode(), 4)
    answer = read_answer(sock)
    assert answer[0] == 4 and answer[1] != 0
    assert _list_topics_works(sock) is not None


HOSTILE_NAMES = ["../escape", "a/b", "/abs", "nul\x00byte", "x" * 250, "..", ".",
                 "é" * 30_000]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_hostile_topic_names_are_refused_everywhere(small_frames_broker, sock, name):
    data_dir = small_frames_broker.data_dir
    outside_before = set(os.listdir(data_dir.parent))
    topic = BodyWriter().string(name).getvalue()
    bodies = {
        Api.CREATE_TOPIC: topic + struct.pack(">I", 1),
        Api.DELETE_TOPIC: topic,
        Api.PRODUCE: topic + struct.pack(">Ih", 0, 1) + encode_batch([b"x"]),
        Api.FETCH: FetchRequest("x", 0, 0, 100, 0).encode().replace(b"\x00\x01x", topic, 1),
    }
    for correlation_id, (api, body) in enumerate(bodies.items()):
        send_request(sock, api, body, correlation_id)
        answer = read_answer(sock)
        assert answer[0] == correlation_id
        assert _error(answer)[0] == InvalidTopicError.code, api
    assert set(os.listdir(data_dir.parent)) == outside_before
    assert not any(".." in entry or "escape" in entry for entry in os.listdir(data_dir))


def test_authenticate_without_a_broker_token_is_accepted(sock):
    send_request(sock, Api.AUTHENTICATE, BodyWriter().short_bytes(b"any").getvalue())
    assert read_answer(sock)[1] == 0


@pytest.mark.parametrize(("version", "tail"), [
    (1, b""),                                   # version 1 without its topic id
    (1, struct.pack(">i", 1)),                  # ends inside the id
    (1, struct.pack(">iq", -1, -1)),            # the no-id marker: not an incarnation
    (1, struct.pack(">iq", -3, 1)),             # negative epoch
    (1, struct.pack(">iq", 1, 1) + b"x"),       # trailing bytes
    (0, struct.pack(">iq", 1, 1)),              # an id where version 0 has none
], ids=["no-id", "short-id", "no-id-marker", "negative", "trailing", "v0-with-id"])
def test_malformed_topic_deletes_are_refused_and_delete_nothing(small_frames_broker, sock,
                                                                topic_name, version, tail):
    """A delete that names an incarnation is never read as one that does not (which would
    delete whatever is live)."""
    with Admin(small_frames_broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
    body = BodyWriter().string(topic_name).getvalue() + tail
    send_request(sock, Api.DELETE_TOPIC, body, version=version)
    assert _error(read_answer(sock))[0] == InvalidRequestError.code
    assert topic_name in _list_topics_works(sock).topics


def test_topic_api_versions_beyond_ours_are_unsupported(sock):
    for api in (Api.CREATE_TOPIC, Api.DELETE_TOPIC, Api.LIST_TOPICS):
        send_request(sock, api, b"", version=2)
        assert _error(read_answer(sock))[0] == UnsupportedVersionError.code
