"""BrokerConnection against a scripted peer on a socketpair: correlation, failure, timeout."""

import socket
import threading

import pytest

from common.kaska import connection as conn_module
from common.kaska.connection import BrokerConnection
from common.kaska.errors import (
    ConnectionLostError,
    LeaderMovedError,
    NotLeaderError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
)
from common.kaska.protocol import ListOffsetsRequest, ListOffsetsResponse
from common.kaska.protocol.frames import (
    REQUEST_HEADER,
    ErrorBody,
    decode_request_header,
    encode_response_header,
)


@pytest.fixture
def pair(monkeypatch):
    client_end, broker_end = socket.socketpair()
    monkeypatch.setattr(conn_module.socket, "create_connection",
                        lambda address, timeout: client_end)
    yield broker_end
    broker_end.close()


def _read_request(sock):
    header = decode_request_header(sock.recv(REQUEST_HEADER.size, socket.MSG_WAITALL))
    body = sock.recv(header.body_bytes, socket.MSG_WAITALL) if header.body_bytes else b""
    return header, body


def _answer(sock, correlation_id, body=b"", code=0):
    sock.sendall(encode_response_header(correlation_id, code, len(body)) + body)


def test_answers_out_of_order_reach_their_own_requests(pair):
    client = BrokerConnection(("127.0.0.1", 1))
    first = client.send(ListOffsetsRequest.API, [ListOffsetsRequest("a", 0).encode()])
    second = client.send(ListOffsetsRequest.API, [ListOffsetsRequest("b", 0).encode()])
    h1, _ = _read_request(pair)
    h2, _ = _read_request(pair)
    _answer(pair, h2.correlation_id, ListOffsetsResponse(0, 2).encode())
    _answer(pair, h1.correlation_id, ListOffsetsResponse(0, 1).encode())
    assert ListOffsetsResponse.decode(first.result(2)[1]).log_end_offset == 1
    assert ListOffsetsResponse.decode(second.result(2)[1]).log_end_offset == 2
    client.close()


def test_error_answer_raises_its_class_with_the_leader_hint(pair):
    client = BrokerConnection(("127.0.0.1", 1))
    result = {}

    def call():
        try:
            client.request(ListOffsetsRequest("a", 0), timeout_s=5)
        except NotLeaderError as error:
            result["error"] = error

    thread = threading.Thread(target=call)
    thread.start()
    header, _ = _read_request(pair)
    _answer(pair, header.correlation_id, ErrorBody("elsewhere", "h2:9093").encode(),
            code=NotLeaderError.code)
    thread.join(5)
    assert result["error"].leader == "h2:9093" and "elsewhere" in str(result["error"])
    assert client.alive  # an error answer is not a broken connection
    client.close()


def test_broken_connection_fails_every_pending_request_loudly(pair):
    client = BrokerConnection(("127.0.0.1", 1))
    futures = [client.send(ListOffsetsRequest.API, [ListOffsetsRequest("a", 0).encode()])
               for _ in range(3)]
    _read_request(pair)
    pair.close()
    for future in futures:
        with pytest.raises(ConnectionLostError, match="127.0.0.1:1"):
            future.result(5)
    assert not client.alive
    with pytest.raises(ConnectionLostError):
        client.send(ListOffsetsRequest.API, [ListOffsetsRequest("a", 0).encode()])


def test_request_timeout_raises_and_kills_the_connection(pair):
    client = BrokerConnection(("127.0.0.1", 1))
    with pytest.raises(RequestTimedOutError):
        client.request(ListOffsetsRequest("a", 0), timeout_s=0.05)
    assert not client.alive


def test_answer_to_an_unknown_correlation_id_breaks_the_connection(pair):
    client = BrokerConnection(("127.0.0.1", 1))
    future = client.send(ListOffsetsRequest.API, [ListOffsetsRequest("a", 0).encode()])
    _read_request(pair)
    _answer(pair, 999, b"")
    with pytest.raises(ConnectionLostError, match="unknown correlation id"):
        future.result(5)


def test_unreadable_error_body_still_gives_the_error_class():
    error = conn_module.error_from_answer(TopicAlreadyExistsError.code, b"\xff")
    assert isinstance(error, TopicAlreadyExistsError)


def test_a_watched_request_is_abandoned_when_the_watch_says_so_and_the_link_lives(pair):
    client = BrokerConnection(("127.0.0.1", 1), request_timeout_s=60.0)
    looks = []

    def still_worth_waiting():
        looks.append(len(looks))
        return "broker 2 names broker 3 leader at epoch 7" if len(looks) == 3 else None

    watch = conn_module.RequestWatch(still_worth_waiting, after_s=0.001, every_s=0.001)
    with pytest.raises(LeaderMovedError, match="names broker 3") as info:
        client.request(ListOffsetsRequest("a", 0), watch=watch)
    assert info.value.retriable and looks == [0, 1, 2]
    # Only the request was given up: the connection still carries the next one.
    _read_request(pair)  # the abandoned one, never answered
    pending = client.send(ListOffsetsRequest.API, [ListOffsetsRequest("b", 0).encode()])
    header, _ = _read_request(pair)
    _answer(pair, header.correlation_id, ListOffsetsResponse(0, 5).encode())
    assert client.alive and ListOffsetsResponse.decode(pending.result(2)[1]).log_end_offset == 5
    client.close()


def test_a_watch_that_finds_nothing_leaves_the_timeout_in_charge(pair):
    client = BrokerConnection(("127.0.0.1", 1))
    looks = []
    watch = conn_module.RequestWatch(lambda: looks.append(1), after_s=0.001, every_s=0.001)
    with pytest.raises(RequestTimedOutError):
        client.request(ListOffsetsRequest("a", 0), timeout_s=0.05, watch=watch)
    assert looks and not client.alive
