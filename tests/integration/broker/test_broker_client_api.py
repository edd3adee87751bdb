"""The client API against a real broker process: topics, produce/fetch, positions, commits."""

import threading
import time

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol import Api
from tests.integration.broker.answer_dropping_proxy import AnswerDroppingProxy
from tests.integration.broker.broker_process import CLIENT_OPTIONS, FAST_FAIL_OPTIONS

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(broker):
    with Admin(broker.address, **CLIENT_OPTIONS) as client:
        yield client


@pytest.fixture
def producer(broker):
    with Producer(broker.address, **CLIENT_OPTIONS) as client:
        yield client


@pytest.fixture
def consumer(broker):
    with Consumer(broker.address, group="g", **CLIENT_OPTIONS) as client:
        yield client


def test_create_list_delete_topics(admin, topic_name):
    before = admin.ntopics()
    admin.create_topic(topic_name, partitions=3)
    assert admin.topics()[topic_name] == 3
    assert admin.ntopics() == before + 1
    assert "__offsets" not in admin.topics() and "__offsets" in admin.topics(True)
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topic(topic_name)
    admin.delete_topic(topic_name)
    assert topic_name not in admin.topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topic(topic_name)


def test_a_retried_delete_never_deletes_a_topic_created_in_between(fresh_broker, topic_name):
    """The delete reaches the broker and is done, its answer is lost; another client creates
    the topic again; the admin's retry (maybe delivered) must leave that new topic alone. It
    did not when the retry named the topic only: it deleted the newcomer."""
    proxy = AnswerDroppingProxy()
    try:
        broker = fresh_broker("--advertise", proxy.address)
        proxy.upstream = broker.host_port
        with Admin(proxy.address, **CLIENT_OPTIONS) as admin, \
                Admin(broker.address, **CLIENT_OPTIONS) as other:
            first = admin.create_topic(topic_name, partitions=1)
            recreated = []
            proxy.drop_answer_to(
                Api.DELETE_TOPIC,
                then=lambda: recreated.append(other.create_topic(topic_name, partitions=2)))
            admin.delete_topic(topic_name)
            assert proxy.dropped.is_set() and recreated, "the answer was lost, then re-created"
            assert recreated[0] != first
            assert other.topics()[topic_name] == 2
            assert other.topic_ids()[topic_name] == recreated[0]
    finally:
        proxy.close()


def test_a_delete_names_one_incarnation(admin, topic_name):
    """An incarnation replaced since is refused (UNKNOWN_TOPIC_ID) and the live one stays; an
    incarnation gone with nothing in its place is done."""
    first = admin.create_topic(topic_name)
    admin.delete_topic(topic_name, first)
    second = admin.create_topic(topic_name, partitions=2)
    assert second != first
    with pytest.raises(UnknownTopicIdError):
        admin.delete_topic(topic_name, first)
    assert admin.topic_ids()[topic_name] == second and admin.topics()[topic_name] == 2
    admin.delete_topic(topic_name)  # the live one
    assert topic_name not in admin.topics()
    admin.delete_topic(topic_name, second)


def test_bad_partition_counts_and_internal_topics_are_refused(admin, topic_name):
    with pytest.raises(InvalidPartitionsError):
        admin.create_topic(topic_name, partitions=100_000)
    with pytest.raises(InvalidTopicError):
        admin.create_topic("__mine")
    with pytest.raises(InvalidTopicError):
        admin.delete_topic("__offsets")


def test_produce_then_read_back_every_record_in_order(admin, producer, consumer, topic_name):
    admin.create_topic(topic_name)
    payloads = [f"record-{i}".encode() * (i % 5 + 1) for i in range(50)]
    assert producer.send_msg(topic_name, payloads[0]) == 0
    assert producer.send_batch(topic_name, 0, payloads[1:30]) == 1
    assert producer.send_batch(topic_name, 0, payloads[30:]) == 30
    consumer.seek(topic_name, 0)
    got = [consumer.poll(5) for _ in payloads]
    assert [m.value for m in got] == payloads
    assert [m.offset for m in got] == list(range(50))
    assert {m.producer_id for m in got} == {producer.producer_id}
    assert [m.sequence for m in got[:2]] == [0, 1] and got[-1].sequence == 2
    assert consumer.poll(0) is None
    assert consumer.position(topic_name) == 50 == consumer.end_offset(topic_name)


def test_msg_length_position_and_seek(admin, producer, consumer, topic_name):
    admin.create_topic(topic_name)
    producer.send_batch(topic_name, 0, [b"a", b"bb" * 50, b""])
    producer.send_msg(topic_name, b"x" * 1000)
    assert [consumer.msg_length(topic_name, o) for o in range(4)] == [1, 100, 0, 1000]
    with pytest.raises(OffsetOutOfRangeError):
        consumer.msg_length(topic_name, 4)
    consumer.seek(topic_name, 2)
    assert consumer.position(topic_name) == 2
    assert consumer.poll(5).value == b""
    assert consumer.position(topic_name) == 3
    consumer.seek(topic_name, 1)  # into the middle of a batch
    assert consumer.poll(5).value == b"bb" * 50


def test_fetch_beyond_the_end_is_out_of_range(admin, producer, consumer, topic_name):
    admin.create_topic(topic_name)
    producer.send_msg(topic_name, b"only")
    consumer.seek(topic_name, 5)
    with pytest.raises(OffsetOutOfRangeError):
        consumer.poll(0)


def test_commit_and_committed(broker, admin, consumer, topic_name):
    admin.create_topic(topic_name, partitions=2)
    assert consumer.committed(topic_name) is None
    consumer.commit(topic_name, 7)
    consumer.commit(topic_name, 3, partition=1)
    consumer.commit(topic_name, 9)
    assert consumer.committed(topic_name) == 9
    assert consumer.committed(topic_name, 1) == 3
    with Consumer(broker.address, group="g", **FAST_FAIL_OPTIONS) as impatient, \
            pytest.raises(UnknownTopicOrPartitionError):
        impatient.committed(topic_name, 5)


def test_subscribe_starts_at_the_end_or_at_the_committed_offset(broker, admin, producer,
                                                                topic_name):
    admin.create_topic(topic_name)
    producer.send_batch(topic_name, 0, [b"old1", b"old2", b"old3"])
    with Consumer(broker.address, group="fresh", **CLIENT_OPTIONS) as fresh:
        fresh.subscribe([topic_name])
        assert fresh.poll(0) is None
        producer.send_msg(topic_name, b"new")
        assert fresh.poll(5).value == b"new"
    with Consumer(broker.address, group="resuming", **CLIENT_OPTIONS) as resuming:
        resuming.commit(topic_name, 1)
        resuming.subscribe(topic_name)
        assert [resuming.poll(5).value for _ in range(3)] == [b"old2", b"old3", b"new"]


def test_poll_reads_every_partition(admin, producer, consumer, topic_name):
    admin.create_topic(topic_name, partitions=3)
    consumer.subscribe(topic_name)
    for p in range(3):
        producer.send_batch(topic_name, p, [f"p{p}-{i}".encode() for i in range(4)])
    got = [consumer.poll(5) for _ in range(12)]
    assert sorted(m.value for m in got) == sorted(f"p{p}-{i}".encode()
                                                  for p in range(3) for i in range(4))
    assert consumer.poll(0.05) is None
    for p in range(3):
        assert consumer.position(topic_name, p) == 4


def test_long_poll_returns_as_soon_as_data_arrives(broker, admin, producer, topic_name):
    admin.create_topic(topic_name)
    result = {}
    started = threading.Event()

    def wait_for_record():
        with Consumer(broker.address, **CLIENT_OPTIONS) as waiting:
            waiting.subscribe(topic_name)
            started.set()
            began = time.monotonic()
            result["message"] = waiting.poll(20)
            result["waited_s"] = time.monotonic() - began

    thread = threading.Thread(target=wait_for_record)
    thread.start()
    assert started.wait(10)
    producer.send_msg(topic_name, b"wake up")
    thread.join(20)
    assert result["message"].value == b"wake up"
    assert result["waited_s"] < 5  # far below the 20 s it was willing to wait


def test_long_poll_on_an_idle_partition_is_bounded_by_the_timeout(consumer, admin, topic_name):
    admin.create_topic(topic_name)
    consumer.subscribe(topic_name)
    began = time.monotonic()
    assert consumer.poll(0.3) is None
    assert 0.25 <= time.monotonic() - began < 3


def test_batching_send_and_flush(admin, producer, consumer, topic_name):
    admin.create_topic(topic_name)
    futures = [producer.send(topic_name, f"m{i}".encode()) for i in range(10)]
    assert not any(f.done() for f in futures)
    producer.flush()
    assert [f.result() for f in futures] == list(range(10))
    consumer.seek(topic_name, 0)
    assert [consumer.poll(5).value for _ in range(10)] == [f"m{i}".encode() for i in range(10)]


def test_unknown_topic_is_reported(broker):
    with Producer(broker.address, **FAST_FAIL_OPTIONS) as producer, \
            pytest.raises(UnknownTopicOrPartitionError):
        producer.send_msg("no-such-topic", b"x")
    with Consumer(broker.address, **FAST_FAIL_OPTIONS) as consumer, \
            pytest.raises(UnknownTopicOrPartitionError):
        consumer.subscribe("no-such-topic")


def test_delete_records_on_a_broker_of_one(admin, producer, consumer, topic_name):
    """A cluster of one commits its DELETE_RECORDS at once: the start moves, a fetch below it
    is out of range, ListOffsets earliest answers it, the records from it on are intact."""
    admin.create_topic(topic_name, partitions=2)
    for n in range(10):
        producer.send_msg(topic_name, b"r%d" % n, partition=1)
    assert admin.delete_records(topic_name, {1: 4, 0: -1}) == {0: 0, 1: 4}
    assert consumer.start_offset(topic_name, 1) == 4
    consumer.seek(topic_name, 3, partition=1)
    with pytest.raises(OffsetOutOfRangeError):
        consumer.poll(timeout_s=2.0)
    consumer.seek(topic_name, 4, partition=1)
    assert consumer.poll(timeout_s=5.0).value == b"r4"
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records(topic_name, {1: 11})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_records(f"{topic_name}-missing", {0: 1})
    with pytest.raises(InvalidTopicError):
        admin.delete_records("__offsets", {0: 1})
