"""Admin client: create, delete and list topics (kafka-topics, in Python).

What the answers promise (docs/replication.md, "What the topic list promises"):
- `create_topic` returns once the topic is committed, with its incarnation (topic id);
- `topics` and `topic_ids` come from the metadata group's leader holding its lease: every
  create or delete acknowledged before the call is in them, an uncommitted create never is;
- `delete_topic` deletes one incarnation: the one named, or the one `topic_ids` shows when it
  starts. Its retries (after an answer that may have been lost) name that incarnation too, so
  a topic of the same name created by someone else meanwhile is never deleted by a retry.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.kaska.cluster import Cluster
from common.kaska.errors import (
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol import CreateTopicRequest, DeleteTopicRequest, ListTopicsRequest
from common.kaska.protocol.list_topics import ListTopicsResponse
from common.kaska.protocol.topic_id import TopicId
from common.kaska.topic_name import is_internal, validate_topic_name


class Admin:
    def __init__(self, brokers: str | Sequence[str], token: str | None = None,
                 **cluster_options) -> None:
        self._cluster = Cluster(brokers, token=token, **cluster_options)

    def create_topic(self, name: str, partitions: int = 1) -> TopicId | None:
        """The new topic's incarnation, once committed; None when an earlier attempt of this
        call made it and its answer was lost (the retry finds it: TopicAlreadyExistsError,
        taken as success). TopicAlreadyExistsError when it exists already."""
        validate_topic_name(name)
        if partitions < 1:
            raise ValueError("a topic has at least one partition")
        answer = self._cluster.call(CreateTopicRequest(name, partitions),
                                    ok_after_delivery=(TopicAlreadyExistsError,))
        return None if answer is None else answer.topic_id

    def delete_topic(self, name: str, topic_id: TopicId | None = None) -> None:
        """Delete incarnation `topic_id` of `name`, by default the one live now. Done when
        that incarnation is gone already (this call's attempt whose answer was lost, or
        someone else, deleted it). InvalidTopicError for an internal topic;
        UnknownTopicOrPartitionError when there is no such topic, or when the incarnation this
        call listed was replaced before its delete arrived (the new one is left alone);
        UnknownTopicIdError when `topic_id`, given, is no longer the live incarnation."""
        validate_topic_name(name)
        if is_internal(name):
            raise InvalidTopicError(f"topic {name!r} is internal to the broker")
        listed = topic_id is None
        if listed:
            topic_id = self.topic_ids().get(name)
            if topic_id is None:
                raise UnknownTopicOrPartitionError(f"no topic {name!r}")
        try:
            self._cluster.call(DeleteTopicRequest(name, topic_id),
                               ok_after_delivery=(UnknownTopicIdError,))
        except UnknownTopicIdError as error:
            if not listed:
                raise
            raise UnknownTopicOrPartitionError(
                f"topic {name!r}: incarnation {topic_id}, listed, was deleted and the topic "
                "created again before this delete arrived; the new one is left alone") from error

    def topics(self, include_internal: bool = False) -> dict[str, int]:
        """Topic name → partition count."""
        return self._list(include_internal).topics

    def topic_ids(self) -> dict[str, TopicId]:
        """Topic name → the incarnation live now (internal topics have none)."""
        return {name: topic_id for name, topic_id in self._list(False).topic_ids.items()
                if topic_id is not None}

    def _list(self, include_internal: bool) -> ListTopicsResponse:
        return self._cluster.call(ListTopicsRequest(include_internal))

    def ntopics(self) -> int:
        return len(self.topics())

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
