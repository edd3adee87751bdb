"""Admin client: create, delete and list topics (kafka-topics, in Python)."""

from __future__ import annotations

from collections.abc import Sequence

from common.kaska.cluster import Cluster
from common.kaska.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from common.kaska.protocol import CreateTopicRequest, DeleteTopicRequest, ListTopicsRequest
from common.kaska.topic_name import validate_topic_name


class Admin:
    def __init__(self, brokers: str | Sequence[str], token: str | None = None,
                 **cluster_options) -> None:
        self._cluster = Cluster(brokers, token=token, **cluster_options)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """TopicAlreadyExistsError when it exists (unless our own retried create made it)."""
        validate_topic_name(name)
        if partitions < 1:
            raise ValueError("a topic has at least one partition")
        self._cluster.call(CreateTopicRequest(name, partitions),
                           ok_after_delivery=(TopicAlreadyExistsError,))

    def delete_topic(self, name: str) -> None:
        """UnknownTopicOrPartitionError at once when there is no such topic."""
        validate_topic_name(name)
        self._cluster.call(DeleteTopicRequest(name),
                           ok_after_delivery=(UnknownTopicOrPartitionError,),
                           no_retry=(UnknownTopicOrPartitionError,))

    def topics(self, include_internal: bool = False) -> dict[str, int]:
        """Topic name → partition count."""
        return self._cluster.call(ListTopicsRequest(include_internal)).topics

    def ntopics(self) -> int:
        return len(self.topics())

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
