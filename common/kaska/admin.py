"""Admin client: create, delete and list topics (kafka-topics, in Python), and delete records
(kafka-delete-records: move partitions' log starts forward).

What the answers promise (docs/replication.md, "What the topic list promises"):
- `create_topic` returns once the topic is committed, with its incarnation (topic id);
- `topics` and `topic_ids` come from the metadata group's leader holding its lease: every
  create or delete acknowledged before the call is in them, an uncommitted create never is;
- `delete_topic` deletes one incarnation: the one named, or the one `topic_ids` shows when it
  starts. Its retries (after an answer that may have been lost) name that incarnation too, so
  a topic of the same name created by someone else meanwhile is never deleted by a retry;
- `delete_records` returns once each partition's new log start is committed on a majority and
  applied on its leader (docs/replication.md, "What DeleteRecords promises"): from then on no
  broker that leads the partition serves an offset below it. It names the incarnation it
  listed, so a topic re-created meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.kaska.cluster import Cluster
from common.kaska.errors import (
    InvalidTopicError,
    KaskaError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from common.kaska.protocol import (
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    ListTopicsRequest,
)
from common.kaska.protocol.delete_records import (
    HIGH_WATERMARK,
    PARTITIONS_MAX,
    DeleteRecordsResponse,
    PartitionDelete,
)
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

    def delete_records(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """Move each partition's log start forward to its offset (-1: its high watermark):
        records below it are gone for every reader, and each broker deletes its whole segments
        below it. Returns partition -> the log start now (the current one, unchanged, for an
        offset at or below it). Each partition is asked of its leader (NOT_LEADER and leader
        moves followed, retriable errors retried with backoff, as produce does); the topic's
        incarnation is listed first and named, so a retry never moves a re-created topic.
        Raises: ValueError for a negative offset other than -1 or a partition outside
        0..1023; InvalidTopicError (illegal or internal topic);
        UnknownTopicOrPartitionError (no such topic or partition, or the listed incarnation
        was replaced); OffsetOutOfRangeError (an offset above the high watermark: nothing
        moved for that partition, and the partitions after it are not asked);
        NotLeaderError / NotEnoughReplicasError / KaskaStorageError once retries run out."""
        validate_topic_name(topic)
        if is_internal(topic):
            raise InvalidTopicError(f"topic {topic!r} is internal to the broker")
        for partition, offset in offsets.items():
            if not 0 <= partition < PARTITIONS_MAX:
                raise ValueError(f"partition {partition} outside 0..{PARTITIONS_MAX - 1}")
            if offset < HIGH_WATERMARK:
                raise ValueError(f"offset {offset} of partition {partition}: -1 (the high "
                                 "watermark) or >= 0")
        topic_id = self.topic_ids().get(topic)
        if topic_id is None:
            raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
        return {partition: self._delete_partition_records(topic, topic_id, partition, offset)
                for partition, offset in sorted(offsets.items())}

    def _delete_partition_records(self, topic: str, topic_id: TopicId, partition: int,
                                  offset: int) -> int:
        request = DeleteRecordsRequest(topic, (PartitionDelete(partition, offset),), topic_id)
        try:
            answer = self._cluster.call(request, route=(topic, partition),
                                        check=_raise_partition_error)
        except UnknownTopicIdError as error:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r}: incarnation {topic_id}, listed, was deleted and the topic "
                "created again before DeleteRecords arrived; the new one is left alone"
            ) from error
        return answer.partitions[0].low_watermark

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


def _raise_partition_error(response: DeleteRecordsResponse) -> None:
    """A partition's error code as the KaskaError its class names (retried by the cluster
    loop when retriable: NOT_LEADER refreshes the leader)."""
    (answer,) = response.partitions
    if answer.error_code:
        error: KaskaError = error_for_code(answer.error_code)(
            f"DeleteRecords of partition {answer.partition}: error code {answer.error_code}")
        raise error
