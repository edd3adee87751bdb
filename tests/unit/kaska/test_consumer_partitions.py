"""A consumer of several partitions and topics: what a new subscription keeps and drops, the
round-robin of fetches across partitions, and the wait each fetch asks the broker for (a fake
clock moves only while the fake broker waits out a long poll, so no test depends on how long
it runs). Driven with an in-memory cluster; no sockets."""

from types import SimpleNamespace

import pytest

from common.kaska import consumer as consumer_module
from common.kaska.consumer import Consumer
from common.kaska.protocol import FetchCommittedRequest, FetchRequest, ListOffsetsRequest
from common.kaska.protocol.fetch_committed import NO_COMMITTED_OFFSET
from common.kaska.record_batch import encode_batch, stamp

TopicPartition = tuple[str, int]


class FakeClock:
    """Stands in for `time.monotonic`: it moves only when the fake broker waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class InMemoryCluster:
    """Topics of `partition_counts[topic]` partitions, one record per batch. Each request is
    encoded as the real cluster sends it (one that cannot go on the wire fails here). A fetch
    answers the records from the offset asked; one that finds none spends its long poll
    (`server_wait_s`) on `clock`, and every answer takes `latency_s` more. Records are
    written by `write`, by `writes_after_fetch[n]` = (key, value) once fetch number n (from
    0) is answered, and one to each `busy` partition before each of its fetches (a producer
    that never stops)."""

    def __init__(self, partition_counts: dict[str, int], clock: FakeClock | None = None):
        self.partition_counts = partition_counts
        self.clock = clock
        self.logs: dict[TopicPartition, list[bytes]] = {
            (topic, p): [] for topic, count in partition_counts.items() for p in range(count)}
        self.committed: dict[TopicPartition, int] = {}
        self.writes_after_fetch: dict[int, tuple[TopicPartition, bytes]] = {}
        self.busy: set[TopicPartition] = set()
        self.latency_s = 0.0
        self.fetches: list[FetchRequest] = []
        self.server_waits_s: list[float] = []

    def write(self, key: TopicPartition, *values: bytes) -> None:
        self.logs[key].extend(values)

    def partition_count(self, topic: str) -> int:
        return self.partition_counts[topic]

    def call(self, request, route=None, server_wait_s=0.0):
        request = type(request).decode(request.encode())
        key = (request.topic, request.partition)
        if isinstance(request, FetchRequest):
            return self._fetch(request, route, server_wait_s)
        if isinstance(request, FetchCommittedRequest):
            return SimpleNamespace(offset=self.committed.get(key, NO_COMMITTED_OFFSET))
        if isinstance(request, ListOffsetsRequest):
            return SimpleNamespace(log_end_offset=len(self.logs[key]), log_start_offset=0)
        raise AssertionError(f"unexpected request {request!r}")

    def _fetch(self, request: FetchRequest, route, server_wait_s: float):
        key = (request.topic, request.partition)
        assert route == key
        if key in self.busy:
            self.write(key, f"{key[1]}-{len(self.logs[key])}".encode())
        self.fetches.append(request)
        self.server_waits_s.append(server_wait_s)
        records = self._records_from(key, request.offset)
        if self.clock is not None:
            self.clock.now += (0.0 if records else server_wait_s) + self.latency_s
        if (written := self.writes_after_fetch.pop(len(self.fetches) - 1, None)) is not None:
            self.write(*written)
        return SimpleNamespace(records=records)

    def _records_from(self, key: TopicPartition, offset: int) -> bytes:
        records = b""
        for record_offset in range(offset, len(self.logs[key])):
            batch = bytearray(encode_batch([self.logs[key][record_offset]],
                                           producer_id=bytes(16), sequence=-1,
                                           timestamp_ms=1_000))
            stamp(batch, record_offset, 1)
            records += bytes(batch)
        return records

    def close(self) -> None:
        pass


def _consumer(cluster: InMemoryCluster) -> Consumer:
    consumer = Consumer("localhost:1")
    consumer._cluster = cluster
    return consumer


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(consumer_module, "monotonic", fake)
    return fake


def _fetched(cluster: InMemoryCluster) -> list[tuple[int, int]]:
    """(partition, max_wait_ms) of each fetch, in order."""
    return [(fetch.partition, fetch.max_wait_ms) for fetch in cluster.fetches]


# -- subscription -------------------------------------------------------------------------------


def test_subscribing_again_to_the_same_topic_keeps_its_position_and_buffered_records():
    cluster = InMemoryCluster({"a": 1})
    cluster.write(("a", 0), b"x", b"y", b"z")
    cluster.committed[("a", 0)] = 0
    consumer = _consumer(cluster)
    consumer.subscribe("a")
    assert consumer.poll(0).offset == 0
    consumer.subscribe("a")
    assert consumer.position("a") == 1, "not sent back to the committed offset"
    assert [consumer.poll(0).value for _ in range(2)] == [b"y", b"z"]
    assert len(cluster.fetches) == 1, "the records buffered by the first fetch were kept"


def test_a_new_subscription_drops_the_partitions_of_the_topics_it_leaves_out():
    consumer = _consumer(InMemoryCluster({"a": 2, "b": 1}))
    consumer.subscribe(["a", "b"])
    assert consumer.assignment() == [("a", 0), ("a", 1), ("b", 0)]
    consumer.subscribe("b")
    assert consumer.assignment() == [("b", 0)]


def test_unsubscribe_drops_every_partition():
    consumer = _consumer(InMemoryCluster({"a": 2, "b": 1}))
    consumer.subscribe(["a", "b"])
    assert len(consumer.assignment()) == 3
    consumer.unsubscribe()
    assert consumer.assignment() == []
    with pytest.raises(ValueError, match="nothing assigned"):
        consumer.poll(0)


# -- the round-robin ----------------------------------------------------------------------------


def test_a_partition_that_always_has_records_does_not_starve_the_others():
    # Partition 0's producer never stops: each round starts one partition further on, so
    # partition 1's record comes second, not never.
    cluster = InMemoryCluster({"a": 2})
    cluster.busy.add(("a", 0))
    cluster.write(("a", 1), b"quiet")
    consumer = _consumer(cluster)
    consumer.seek("a", 0, partition=0)
    consumer.seek("a", 0, partition=1)
    polled = [consumer.poll(0) for _ in range(4)]
    assert [(m.partition, m.offset) for m in polled] == [(0, 0), (1, 0), (0, 1), (0, 2)]
    assert [partition for partition, _ in _fetched(cluster)] == [0, 1, 0, 1, 0]


def test_only_the_last_partition_of_a_round_long_polls_and_for_at_most_the_multi_wait():
    # The first round finds nothing: partition 0 is asked without waiting, partition 1 (the
    # last) long-polls for the default 100 ms, not the poll's whole 5 s. A record written
    # meanwhile on partition 1 is fetched first, without waiting, by the next round.
    cluster = InMemoryCluster({"a": 2})
    cluster.writes_after_fetch[1] = (("a", 1), b"late")
    consumer = _consumer(cluster)
    consumer.seek("a", 0, partition=0)
    consumer.seek("a", 0, partition=1)
    message = consumer.poll(5.0)
    assert len(cluster.fetches) == 3, "two rounds"
    assert (message.partition, message.value) == (1, b"late")
    assert _fetched(cluster) == [(0, 0), (1, 100), (1, 0)]
    assert cluster.server_waits_s == [0.0, 0.1, 0.0]


# -- the wait asked of the broker ----------------------------------------------------------------


def test_a_poll_without_a_timeout_asks_the_broker_not_to_wait(clock):
    cluster = InMemoryCluster({"a": 1}, clock)
    consumer = _consumer(cluster)
    consumer.seek("a", 0)
    assert consumer.poll() is None
    assert _fetched(cluster) == [(0, 0)]
    assert cluster.server_waits_s == [0.0] and clock.now == 0.0


def test_a_poll_long_polls_its_whole_timeout_then_makes_a_last_round(clock):
    cluster = InMemoryCluster({"a": 1}, clock)
    consumer = _consumer(cluster)
    consumer.seek("a", 0)
    assert consumer.poll(1.0) is None
    assert _fetched(cluster) == [(0, 1000), (0, 0)]
    assert cluster.server_waits_s == [1.0, 0.0]


def test_a_poll_whose_time_ran_out_asks_for_no_wait_not_a_negative_one(clock):
    # The broker answers 2 ms after the long poll it was asked for (latency): the poll's time
    # is then spent and its last round must not ask for -2 ms.
    cluster = InMemoryCluster({"a": 1}, clock)
    cluster.latency_s = 0.002
    consumer = _consumer(cluster)
    consumer.seek("a", 0)
    assert consumer.poll(0.05) is None
    assert clock.now > 0.05, "the scenario: the poll's time ran out"
    assert _fetched(cluster) == [(0, 50), (0, 0)]
    assert cluster.server_waits_s == [0.05, 0.0]


def test_a_record_written_as_the_last_long_poll_ends_is_returned(clock):
    # 1 ms left: the long poll finds nothing, a record lands as it ends; the last round, with
    # no time left, still fetches it.
    cluster = InMemoryCluster({"a": 1}, clock)
    cluster.writes_after_fetch[0] = (("a", 0), b"just in time")
    consumer = _consumer(cluster)
    consumer.seek("a", 0)
    message = consumer.poll(0.001)
    assert _fetched(cluster) == [(0, 1), (0, 0)]
    assert message is not None and message.value == b"just in time"
