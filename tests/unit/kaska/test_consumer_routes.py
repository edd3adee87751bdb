"""Where the consumer sends each offset request: to the leader of the partition it names
(partition 0 when none is given) and, for commits, to the leader of `__offsets`' partition 0,
where the broker stores every group's positions. A recording fake cluster; no sockets."""

from types import SimpleNamespace

from common.kaska.consumer import Consumer
from common.kaska.protocol import (
    CommitOffsetRequest,
    FetchCommittedRequest,
    ListOffsetsRequest,
    MessageLengthRequest,
)
from common.kaska.topic_name import OFFSETS_TOPIC


class RecordingCluster:
    """Answers every request; keeps (request, route) of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, tuple[str, int] | None]] = []

    def call(self, request, route=None, server_wait_s=None):
        self.calls.append((request, route))
        return SimpleNamespace(log_start_offset=3, log_end_offset=9, length=5, offset=6)

    def close(self) -> None:
        pass


def _consumer() -> tuple[Consumer, RecordingCluster]:
    consumer = Consumer("localhost:1", group="g")
    cluster = RecordingCluster()
    consumer._cluster = cluster
    return consumer, cluster


def test_offset_requests_without_a_partition_go_to_partition_0_of_the_topic():
    consumer, cluster = _consumer()
    assert consumer.start_offset("t") == 3
    assert consumer.end_offset("t") == 9
    assert consumer.msg_length("t", 4) == 5
    assert len(cluster.calls) == 3  # the scenario: one request each
    for request, route in cluster.calls:
        assert isinstance(request, ListOffsetsRequest | MessageLengthRequest)
        assert (request.topic, request.partition) == ("t", 0)
        assert route == ("t", 0)


def test_offset_requests_naming_a_partition_go_to_its_leader():
    consumer, cluster = _consumer()
    consumer.start_offset("t", 2)
    consumer.msg_length("t", 4, 2)
    assert [(request.partition, route) for request, route in cluster.calls] == [
        (2, ("t", 2)), (2, ("t", 2))]


def test_a_commit_names_its_partition_and_goes_to_the_leader_of_offsets_partition_0():
    consumer, cluster = _consumer()
    consumer.commit("t", 7)
    consumer.commit("t", 8, partition=1)
    assert len(cluster.calls) == 2
    (first, first_route), (second, second_route) = cluster.calls
    assert isinstance(first, CommitOffsetRequest) and isinstance(second, CommitOffsetRequest)
    assert (first.group, first.topic, first.partition, first.offset) == ("g", "t", 0, 7)
    assert (second.partition, second.offset) == (1, 8)
    assert first_route == second_route == (OFFSETS_TOPIC, 0)


def test_a_committed_lookup_without_a_partition_asks_for_partition_0_at_offsets_partition_0():
    consumer, cluster = _consumer()
    assert consumer.committed("t") == 6
    assert consumer.committed("t", 2) == 6
    assert len(cluster.calls) == 2
    (first, first_route), (second, second_route) = cluster.calls
    assert isinstance(first, FetchCommittedRequest) and isinstance(second, FetchCommittedRequest)
    assert (first.group, first.topic, first.partition) == ("g", "t", 0)
    assert second.partition == 2
    assert first_route == second_route == (OFFSETS_TOPIC, 0)
