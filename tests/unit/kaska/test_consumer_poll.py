"""Consumer.poll returns the record at its position first: a broker answers a fetch with whole
batches, so the first batch may start before the position and the consumer must drop exactly
the records before it (and not the one at it). Driven with a fake cluster; no sockets."""

from types import SimpleNamespace

import pytest

from common.kaska.consumer import Consumer
from common.kaska.protocol import (
    FetchCommittedRequest,
    FetchRequest,
    ListOffsetsRequest,
)
from common.kaska.protocol.fetch_committed import NO_COMMITTED_OFFSET
from common.kaska.record_batch import encode_batch, parse_header, stamp

TOPIC = "t"


class FakeCluster:
    """One partition of TOPIC whose log is `batches` (lists of values), stamped densely from
    offset 0; a fetch answers every whole batch that holds the fetched offset or a later one."""

    def __init__(self, batches: list[list[bytes]], committed: int | None = None):
        self.log = b""
        base = 0
        for values in batches:
            data = bytearray(encode_batch(values, producer_id=bytes(16), sequence=-1,
                                          timestamp_ms=1_000))
            stamp(data, base, 1)
            self.log += bytes(data)
            base += len(values)
        self.end_offset = base
        self.committed = NO_COMMITTED_OFFSET if committed is None else committed
        self.fetched_from: list[int] = []
        self.server_waits_s: list[float] = []

    def partition_count(self, topic: str) -> int:
        assert topic == TOPIC
        return 1

    def call(self, request, route=None, server_wait_s=None):
        if isinstance(request, FetchRequest):
            self.fetched_from.append(request.offset)
            self.server_waits_s.append(server_wait_s)
            return SimpleNamespace(records=self._batches_from(request.offset))
        if isinstance(request, FetchCommittedRequest):
            return SimpleNamespace(offset=self.committed)
        if isinstance(request, ListOffsetsRequest):
            return SimpleNamespace(log_end_offset=self.end_offset, log_start_offset=0)
        raise AssertionError(f"unexpected request {request!r}")

    def _batches_from(self, offset: int) -> bytes:
        position = 0
        while position < len(self.log):
            header = parse_header(self.log, position)
            if header.next_offset > offset:
                return self.log[position:]
            position += header.total_bytes
        return b""

    def close(self) -> None:
        pass


def _consumer(cluster: FakeCluster) -> Consumer:
    consumer = Consumer("localhost:1")
    consumer._cluster = cluster
    return consumer


def _poll_offsets(consumer: Consumer, count: int) -> list[tuple[int, bytes]]:
    polled = []
    for _ in range(count):
        message = consumer.poll(0)
        assert message is not None
        polled.append((message.offset, message.value))
    return polled


def test_the_first_record_polled_is_the_one_at_offset_zero():
    consumer = _consumer(FakeCluster([[b"a", b"b"], [b"c"]]))
    consumer.seek(TOPIC, 0)
    assert _poll_offsets(consumer, 3) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert consumer.position(TOPIC) == 3
    assert consumer.poll(0) is None


def test_a_seek_into_the_middle_of_a_batch_polls_the_record_at_the_seek_offset():
    cluster = FakeCluster([[b"a", b"b", b"c", b"d"], [b"e"]])
    consumer = _consumer(cluster)
    consumer.seek(TOPIC, 2)
    assert consumer.position(TOPIC) == 2
    assert _poll_offsets(consumer, 3) == [(2, b"c"), (3, b"d"), (4, b"e")]
    assert cluster.fetched_from[0] == 2


def test_a_seek_back_after_polling_polls_the_record_at_the_new_position():
    consumer = _consumer(FakeCluster([[b"a", b"b", b"c"]]))
    consumer.seek(TOPIC, 0)
    assert _poll_offsets(consumer, 2) == [(0, b"a"), (1, b"b")]
    consumer.seek(TOPIC, 1)
    assert _poll_offsets(consumer, 2) == [(1, b"b"), (2, b"c")]


def test_a_subscriber_resumes_at_the_committed_offset_with_that_record():
    consumer = _consumer(FakeCluster([[b"a", b"b", b"c"], [b"d"]], committed=1))
    consumer.subscribe(TOPIC)
    assert consumer.position(TOPIC) == 1
    assert _poll_offsets(consumer, 3) == [(1, b"b"), (2, b"c"), (3, b"d")]


def test_a_subscriber_with_nothing_committed_starts_at_the_end():
    cluster = FakeCluster([[b"a"]])
    consumer = _consumer(cluster)
    consumer.subscribe(TOPIC)
    assert consumer.position(TOPIC) == 1 and consumer.poll(0) is None


def test_a_poll_with_no_time_left_makes_one_fetch_round():
    cluster = FakeCluster([[b"a"]])
    consumer = _consumer(cluster)
    consumer.seek(TOPIC, 1)  # at the end: nothing to read
    assert consumer.poll(0) is None
    assert cluster.fetched_from == [1], "one round, then the answer: nothing"


def test_a_poll_at_the_end_asks_the_broker_to_wait_out_its_timeout():
    # One partition: the fetch itself waits at the broker for what is left of the timeout.
    cluster = FakeCluster([[b"a"]])
    consumer = _consumer(cluster)
    consumer.seek(TOPIC, 1)
    assert consumer.poll(0.3) is None
    assert cluster.server_waits_s[0] == pytest.approx(0.3, abs=0.05)


def test_a_negative_offset_is_refused():
    consumer = _consumer(FakeCluster([[b"a"]]))
    with pytest.raises(ValueError, match=">= 0"):
        consumer.seek(TOPIC, -1)


def test_a_topic_named_by_one_string_is_one_topic():
    cluster = FakeCluster([[b"a"]], committed=0)
    asked: list[str] = []
    cluster.partition_count = lambda topic: asked.append(topic) or 0  # no partition to assign
    consumer = _consumer(cluster)
    consumer.subscribe("flights")
    consumer.subscribe(["flights", "airports"])
    assert asked == ["flights", "flights", "airports"]
