"""DELETE_RECORDS bodies: what a hostile or broken frame gets (refused whole, never a crash),
and the client's Admin.delete_records over a scripted cluster."""

from __future__ import annotations

import struct

import pytest

from common.kaska.admin import Admin
from common.kaska.errors import (
    InvalidRequestError,
    InvalidResponseError,
    InvalidTopicError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol import Api, ListTopicsRequest, ListTopicsResponse
from common.kaska.protocol.codec import BodyWriter
from common.kaska.protocol.delete_records import (
    PARTITIONS_MAX,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    PartitionDelete,
    PartitionDeleted,
)
from common.kaska.protocol.topic_id import TopicId

LIVE = TopicId(2, 17)


def test_the_api_number_is_11_below_the_replication_range():
    assert Api.DELETE_RECORDS == 11


def _body(topic: str, items: list[tuple[int, int]], topic_id: TopicId | None = LIVE) -> bytes:
    writer = BodyWriter().string(topic)
    if topic_id is not None:
        writer.i32(topic_id.epoch).i64(topic_id.index)
    writer.u32(len(items))
    for partition, offset in items:
        writer.u32(partition).i64(offset)
    return writer.getvalue()


@pytest.mark.parametrize("items", [
    [(0, 1), (0, 2)],  # named twice
    [(PARTITIONS_MAX, 1)],  # beyond the storage bound
    [(0, -2)],  # only -1 is special
    [(p, 0) for p in range(PARTITIONS_MAX)] + [(0, 0)],  # more than a topic can have
])
def test_broken_partition_lists_are_refused_whole(items):
    with pytest.raises(InvalidRequestError):
        DeleteRecordsRequest.decode(_body("t", items), 1)


def test_a_count_larger_than_the_body_is_refused_before_reading():
    body = BodyWriter().string("t").i32(2).i64(17).u32(0xFFFFFFFF).getvalue()
    with pytest.raises(InvalidRequestError):
        DeleteRecordsRequest.decode(body, 1)


def test_version_1_must_name_an_incarnation_and_version_0_must_not():
    with pytest.raises(InvalidRequestError):
        DeleteRecordsRequest.decode(_body("t", [], TopicId(-1, -1)), 1)
    with pytest.raises(InvalidRequestError):
        DeleteRecordsRequest.decode(_body("t", [(0, 1)]), 0)
    assert DeleteRecordsRequest.decode(_body("t", [(0, 1)], None), 0) == \
        DeleteRecordsRequest("t", (PartitionDelete(0, 1),))


def test_a_response_with_an_impossible_low_watermark_is_refused():
    body = struct.pack(">IIhq", 1, 0, 0, -5)
    with pytest.raises(InvalidResponseError):
        DeleteRecordsResponse.decode(body)


# -- Admin.delete_records ------------------------------------------------------------------------


class ScriptedCluster:
    """LIST_TOPICS: topic `t` (incarnation LIVE); DELETE_RECORDS: answers popped from
    `answers` per call (a DeleteRecordsResponse), with the `check` the client passed applied
    as the real Cluster does; every call recorded."""

    def __init__(self, answers: list[DeleteRecordsResponse]) -> None:
        self.calls: list[tuple[object, dict]] = []
        self.answers = answers

    def call(self, request, **options):
        self.calls.append((request, options))
        if isinstance(request, ListTopicsRequest):
            return ListTopicsResponse({"t": 3, "__offsets": 1}, {"t": LIVE, "__offsets": None})
        response = self.answers.pop(0)
        options["check"](response)
        return response

    def close(self) -> None:
        pass


def _admin(cluster: ScriptedCluster) -> Admin:
    admin = Admin("127.0.0.1:1")
    admin._cluster.close()
    admin._cluster = cluster
    return admin


def test_each_partition_goes_to_its_leader_naming_the_listed_incarnation():
    cluster = ScriptedCluster([DeleteRecordsResponse((PartitionDeleted(0, 0, 10),)),
                               DeleteRecordsResponse((PartitionDeleted(2, 0, 7),))])
    assert _admin(cluster).delete_records("t", {2: -1, 0: 10}) == {0: 10, 2: 7}
    sent = [(request, options["route"]) for request, options in cluster.calls[1:]]
    assert sent == [
        (DeleteRecordsRequest("t", (PartitionDelete(0, 10),), LIVE), ("t", 0)),
        (DeleteRecordsRequest("t", (PartitionDelete(2, -1),), LIVE), ("t", 2)),
    ]
    assert all(request.version == 1 for request, _ in sent)


@pytest.mark.parametrize(("code", "error"), [
    (OffsetOutOfRangeError.code, OffsetOutOfRangeError),
    (NotLeaderError.code, NotLeaderError),
])
def test_a_partition_error_is_raised_as_its_class_for_the_retry_loop(code, error):
    cluster = ScriptedCluster([DeleteRecordsResponse((PartitionDeleted(0, code, -1),))])
    with pytest.raises(error):
        _admin(cluster).delete_records("t", {0: 5})


def test_a_replaced_incarnation_is_reported_as_gone():
    class Replaced(ScriptedCluster):
        def call(self, request, **options):
            if isinstance(request, DeleteRecordsRequest):
                raise UnknownTopicIdError("another incarnation")
            return super().call(request, **options)

    with pytest.raises(UnknownTopicOrPartitionError, match="left alone"):
        _admin(Replaced([])).delete_records("t", {0: 5})


@pytest.mark.parametrize(("topic", "offsets", "error"), [
    ("__offsets", {0: 1}, InvalidTopicError),
    ("t", {0: -2}, ValueError),
    ("t", {PARTITIONS_MAX: 1}, ValueError),
    ("nope", {0: 1}, UnknownTopicOrPartitionError),
])
def test_bad_arguments_are_refused_before_any_delete(topic, offsets, error):
    cluster = ScriptedCluster([])
    with pytest.raises(error):
        _admin(cluster).delete_records(topic, offsets)
    assert not any(isinstance(r, DeleteRecordsRequest) for r, _ in cluster.calls)
