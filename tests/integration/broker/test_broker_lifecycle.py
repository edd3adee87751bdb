"""Token authentication, graceful SIGTERM, and the in-process BrokerServer."""

import threading
from socket import create_connection

import pytest
from prometheus_client import generate_latest

from common.address import Address
from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import (
    AuthenticationError,
    BrokerUnavailableError,
    ConnectionLostError,
    KaskaError,
)
from common.kaska.protocol import Api, AuthenticateRequest, ListTopicsRequest
from services.broker.config import BrokerConfig, NetworkConfig
from services.broker.metrics import broker_registry
from services.broker.replication.config import ReplicationConfig
from services.broker.server import BrokerServer
from tests.integration.broker.broker_process import (
    CLIENT_OPTIONS,
    FAST_FAIL_OPTIONS,
    closed_by_peer,
    raw_connect,
    read_answer,
    send_request,
)

pytestmark = pytest.mark.integration

TOKEN = "correct horse battery staple"


@pytest.fixture(scope="module")
def token_broker(tmp_path_factory):
    from tests.integration.broker.broker_process import BrokerProcess

    process = BrokerProcess(tmp_path_factory.mktemp("auth") / "data", "--token", TOKEN).start()
    yield process
    process.kill()


def test_right_token_is_served(token_broker, topic_name):
    with Admin(token_broker.address, token=TOKEN, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
        assert topic_name in admin.topics()


def test_wrong_token_is_refused_and_closed(token_broker):
    with Admin(token_broker.address, token="guess", **FAST_FAIL_OPTIONS) as admin, \
            pytest.raises(AuthenticationError):
        admin.topics()
    sock = raw_connect(token_broker)
    send_request(sock, Api.AUTHENTICATE, AuthenticateRequest(b"guess").encode())
    assert read_answer(sock)[1] == AuthenticationError.code
    assert closed_by_peer(sock)
    sock.close()


def test_any_request_before_authenticating_is_refused_and_closed(token_broker):
    sock = raw_connect(token_broker)
    send_request(sock, Api.LIST_TOPICS, ListTopicsRequest().encode())
    assert read_answer(sock)[1] == AuthenticationError.code
    assert closed_by_peer(sock)
    sock.close()
    with Admin(token_broker.address, **FAST_FAIL_OPTIONS) as admin, \
            pytest.raises(AuthenticationError):
        admin.topics()


def test_sigterm_with_busy_clients_exits_zero_quickly(fresh_broker, topic_name):
    broker = fresh_broker()
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
    idle = raw_connect(broker)  # an idle connection must not hold the shutdown up
    polled = {}
    subscribed = threading.Event()

    def long_poll():
        with Consumer(broker.address, **FAST_FAIL_OPTIONS) as consumer:
            consumer.subscribe(topic_name)
            subscribed.set()
            try:
                polled["message"] = consumer.poll(30)
            except (ConnectionLostError, BrokerUnavailableError) as error:
                polled["error"] = error  # the broker went away: what a poll then reports

    thread = threading.Thread(target=long_poll)
    thread.start()
    assert subscribed.wait(10)
    code, took_s = broker.terminate()
    thread.join(10)
    idle.close()
    assert code == 0, broker.tail()
    assert took_s < 5
    assert not thread.is_alive()
    assert polled.get("message") is None and isinstance(polled.get("error"), KaskaError)


def test_in_process_server_start_stop_and_data_survives(tmp_path, topic_name):
    config = BrokerConfig(data_dir=tmp_path / "data", replication=ReplicationConfig(node_id=7),
                          network=NetworkConfig(listen=Address("127.0.0.1", 0)))
    with BrokerServer(config) as server:
        address = server.bootstrap
        with Admin(address, **CLIENT_OPTIONS) as admin, \
                Producer(address, **CLIENT_OPTIONS) as producer:
            admin.create_topic(topic_name)
            producer.send_batch(topic_name, 0, [b"in", b"process"])
    assert server.wait(0)
    with BrokerServer(config) as server:
        address = server.bootstrap
        with Consumer(address, **CLIENT_OPTIONS) as consumer:
            consumer.seek(topic_name, 0)
            assert [consumer.poll(5).value for _ in range(2)] == [b"in", b"process"]


def test_connections_over_the_limit_are_closed(tmp_path):
    config = BrokerConfig(
        data_dir=tmp_path / "data", replication=ReplicationConfig(node_id=1),
        network=NetworkConfig(listen=Address("127.0.0.1", 0), connections_max=2))
    with BrokerServer(config) as server:
        held = [create_connection(server.address) for _ in range(2)]
        for sock in held:  # an answer proves the broker counts the connection
            send_request(sock, Api.LIST_TOPICS, ListTopicsRequest().encode())
            assert read_answer(sock)[1] == 0
        refused = create_connection(server.address)
        assert closed_by_peer(refused)
        scraped = generate_latest(broker_registry(server)).decode()
        assert 'kaska_listener_connections_refused_total{listener="kaska",reason="full"} 1.0' \
            in scraped
        assert 'kaska_listener_connections{listener="kaska"} 2.0' in scraped
        for sock in held + [refused]:
            sock.close()
        with Admin(server.bootstrap, **CLIENT_OPTIONS) as admin:  # slots free again
            assert admin.topics() == {}
