"""What must survive a broker restart or a lost answer: commits, and exactly-once batches."""

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import OutOfOrderSequenceError
from common.kaska.protocol import Api, CreateTopicRequest, ProduceRequest, ProduceResponse
from common.kaska.record_batch import encode_batch
from tests.integration.broker.answer_dropping_proxy import AnswerDroppingProxy
from tests.integration.broker.broker_process import (
    CLIENT_OPTIONS,
    raw_connect,
    read_answer,
    send_request,
)

pytestmark = pytest.mark.integration

PRODUCER_ID = bytes(range(16))


def _produce_raw(broker, topic, batch):
    sock = raw_connect(broker)
    try:
        send_request(sock, Api.PRODUCE, ProduceRequest(topic, 0, -1, batch).encode())
        _, code, body = read_answer(sock)
        assert code == 0, body
        return ProduceResponse.decode(body)
    finally:
        sock.close()


def _values(broker, topic):
    with Consumer(broker.address, **CLIENT_OPTIONS) as consumer:
        end = consumer.end_offset(topic)
        consumer.seek(topic, 0)
        return [consumer.poll(5).value for _ in range(end)]


def test_same_batch_twice_is_stored_once_even_across_a_restart(fresh_broker, topic_name):
    broker = fresh_broker()
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
    first = encode_batch([b"a", b"b"], producer_id=PRODUCER_ID, sequence=0)
    second = encode_batch([b"c"], producer_id=PRODUCER_ID, sequence=1)
    assert _produce_raw(broker, topic_name, first) == ProduceResponse(0, 2, False)
    assert _produce_raw(broker, topic_name, first) == ProduceResponse(0, 2, True)
    assert _produce_raw(broker, topic_name, second) == ProduceResponse(2, 1, False)
    broker.restart()
    assert _produce_raw(broker, topic_name, first) == ProduceResponse(0, 2, True)
    assert _produce_raw(broker, topic_name, second) == ProduceResponse(2, 1, True)
    assert _values(broker, topic_name) == [b"a", b"b", b"c"]


def test_resumed_producer_with_explicit_sequences_stores_nothing_twice(fresh_broker,
                                                                       topic_name):
    broker = fresh_broker()
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
    with Producer(broker.address, producer_id=PRODUCER_ID, **CLIENT_OPTIONS) as producer:
        assert [producer.send_msg(topic_name, m) for m in (b"m0", b"m1", b"m2")] == [0, 1, 2]
    broker.restart()
    with Producer(broker.address, producer_id=PRODUCER_ID, **CLIENT_OPTIONS) as resumed:
        # It does not know how far it got: it re-sends from message id 1.
        assert resumed.send_batch(topic_name, 0, [b"m1"], sequence=1) == 1
        assert resumed.send_batch(topic_name, 0, [b"m2"], sequence=2) == 2
        assert resumed.send_msg(topic_name, b"m3") == 3
        with pytest.raises(OutOfOrderSequenceError):
            resumed.send_batch(topic_name, 0, [b"m9"], sequence=9)
    assert _values(broker, topic_name) == [b"m0", b"m1", b"m2", b"m3"]


def test_lost_answer_is_retried_transparently_without_a_duplicate(fresh_broker, topic_name):
    proxy = AnswerDroppingProxy()
    try:
        broker = fresh_broker("--advertise", proxy.address)
        proxy.upstream = broker.host_port
        with Admin(proxy.address, **CLIENT_OPTIONS) as admin:
            admin.create_topic(topic_name)
        with Producer(proxy.address, **CLIENT_OPTIONS) as producer:
            assert producer.send_msg(topic_name, b"first") == 0
            proxy.drop_next_answer()
            assert producer.send_msg(topic_name, b"second") == 1
            assert proxy.dropped.is_set()
            assert producer.send_msg(topic_name, b"third") == 2
        assert _values(broker, topic_name) == [b"first", b"second", b"third"]
    finally:
        proxy.close()


def test_producer_rides_out_a_broker_restart(fresh_broker, topic_name):
    broker = fresh_broker()
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
    with Producer(broker.address, **CLIENT_OPTIONS) as producer:
        assert producer.send_msg(topic_name, b"before") == 0
        broker.restart()  # same port: the producer's connection is dead, its retry reconnects
        assert producer.send_msg(topic_name, b"after") == 1
    assert _values(broker, topic_name) == [b"before", b"after"]


def test_committed_offsets_survive_a_restart(fresh_broker, topic_name):
    broker = fresh_broker()
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name, partitions=2)
    with Consumer(broker.address, group="keeper", **CLIENT_OPTIONS) as consumer:
        consumer.commit(topic_name, 11)
        consumer.commit(topic_name, 12)
        consumer.commit(topic_name, 4, partition=1)
    broker.restart()
    with Consumer(broker.address, group="keeper", **CLIENT_OPTIONS) as consumer:
        assert consumer.committed(topic_name) == 12
        assert consumer.committed(topic_name, 1) == 4
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.delete_topic(topic_name)
        admin.create_topic(topic_name, partitions=2)
    with Consumer(broker.address, group="keeper", **CLIENT_OPTIONS) as consumer:
        assert consumer.committed(topic_name) is None  # a new topic starts with no commits


def test_records_survive_sigkill(fresh_broker, topic_name):
    broker = fresh_broker()
    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name)
    with Producer(broker.address, **CLIENT_OPTIONS) as producer:
        producer.send_batch(topic_name, 0, [b"acked-1", b"acked-2"])
    broker.kill()
    broker.start()
    assert _values(broker, topic_name) == [b"acked-1", b"acked-2"]
    sock = raw_connect(broker)
    send_request(sock, Api.CREATE_TOPIC, CreateTopicRequest(topic_name, 1).encode())
    assert read_answer(sock)[1] != 0  # the topic itself came back too
    sock.close()
