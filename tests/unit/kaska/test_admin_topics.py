"""The Admin client's topic calls over a scripted cluster: what it sends, and what it makes of
the answers."""

from __future__ import annotations

import pytest

from common.kaska.admin import Admin
from common.kaska.errors import (
    InvalidTopicError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol import DeleteTopicRequest, ListTopicsRequest, ListTopicsResponse
from common.kaska.protocol.topic_id import TopicId

LIVE = TopicId(2, 17)


class ScriptedCluster:
    """Answers LIST_TOPICS with one topic `t` (incarnation LIVE); a delete's answer is
    `delete_outcome` (an exception to raise, or None); records every call."""

    def __init__(self, delete_outcome: Exception | None = None) -> None:
        self.calls: list[tuple[object, dict]] = []
        self.delete_outcome = delete_outcome

    def call(self, request, **options):
        self.calls.append((request, options))
        if isinstance(request, ListTopicsRequest):
            return ListTopicsResponse({"t": 3, "__offsets": 1}, {"t": LIVE, "__offsets": None})
        if self.delete_outcome is not None:
            raise self.delete_outcome
        return None

    def close(self) -> None:
        pass


def _admin(cluster: ScriptedCluster) -> Admin:
    admin = Admin("127.0.0.1:1")
    admin._cluster.close()
    admin._cluster = cluster
    return admin


def test_a_delete_names_the_incarnation_it_listed_and_its_retries_do_too():
    cluster = ScriptedCluster()
    _admin(cluster).delete_topic("t")
    (listed, _), (deleted, options) = cluster.calls
    assert isinstance(listed, ListTopicsRequest)
    assert deleted == DeleteTopicRequest("t", LIVE) and deleted.version == 1
    assert UnknownTopicIdError in options["ok_after_delivery"], \
        "a retry that finds another incarnation: the first attempt deleted ours"


def test_a_listed_incarnation_replaced_before_the_delete_arrives_is_reported_gone():
    cluster = ScriptedCluster(UnknownTopicIdError("t is another incarnation now"))
    with pytest.raises(UnknownTopicOrPartitionError, match="left alone"):
        _admin(cluster).delete_topic("t")


def test_a_named_incarnation_no_longer_live_is_unknown_topic_id():
    cluster = ScriptedCluster(UnknownTopicIdError("t is another incarnation now"))
    with pytest.raises(UnknownTopicIdError):
        _admin(cluster).delete_topic("t", TopicId(1, 4))
    ((deleted, _),) = cluster.calls
    assert deleted.topic_id == TopicId(1, 4)


def test_no_topic_and_internal_topics_send_no_delete():
    cluster = ScriptedCluster()
    admin = _admin(cluster)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topic("missing")
    with pytest.raises(InvalidTopicError):
        admin.delete_topic("__offsets")
    assert not any(isinstance(request, DeleteTopicRequest) for request, _ in cluster.calls)
    assert admin.topic_ids() == {"t": LIVE} and admin.topics(True) == {"t": 3, "__offsets": 1}
