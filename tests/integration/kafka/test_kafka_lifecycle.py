"""The Kafka listener starts and stops with its broker: a SIGTERM with Kafka clients connected
(one idle, one long-polling, one group member) still exits 0 within seconds; a taken Kafka port
fails the start."""

from __future__ import annotations

import socket
import threading

import pytest
from confluent_kafka import TopicPartition

from tests.integration.broker.broker_process import BrokerProcess
from tests.integration.kafka.clients import consume, create_topic, kafka_consumer, produce
from tests.integration.kafka.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration

STOP_WITHIN_S = 8.0


def test_sigterm_with_kafka_clients_connected_exits_cleanly(tmp_path):
    broker = KafkaBroker(tmp_path / "data").start()
    try:
        bootstrap = broker.kafka_address
        create_topic(bootstrap, "lifecycle", 1)
        produce(bootstrap, "lifecycle", [(0, None, b"one")])
        idle = socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10)
        member = kafka_consumer(bootstrap, "lifecycle-group", **{"session.timeout.ms": 6000})
        member.subscribe(["lifecycle"])
        assert consume(member, 1)[0][3] == b"one"
        poller = kafka_consumer(bootstrap, **{"fetch.wait.max.ms": 5000})
        poller.assign([TopicPartition("lifecycle", 0, 1)])  # caught up: long-polls
        polling = threading.Thread(target=poller.poll, args=(3.0,))
        polling.start()
        code, took_s = broker.terminate(timeout_s=30)
        polling.join(10)
        idle.close()
        member.close()
        poller.close()
    finally:
        broker.kill()
    assert code == 0, broker.tail()
    assert took_s < STOP_WITHIN_S, f"stopping took {took_s:.1f} s"


def test_taken_kafka_port_fails_the_start(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        broker = BrokerProcess(tmp_path / "data", "--kafka-listen",
                               f"127.0.0.1:{taken.getsockname()[1]}")
        with pytest.raises(RuntimeError, match="failed to start"):
            broker.start()
        assert "Address already in use" in broker.tail()
    finally:
        taken.close()
