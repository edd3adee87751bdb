"""FindCoordinator (api key 10, v0..3), OffsetCommit (8, v2..9) and OffsetFetch (9, v1..7):
Kafka consumer groups' committed offsets, kept in Kaska's own table (offsets.py, the
`__offsets` topic), so an offset committed through either protocol is read back through both.

The coordinator of every group is the leader of `__offsets` partition 0 -- where Kaska's
COMMIT_OFFSET goes too; elsewhere the group APIs answer NOT_COORDINATOR, and clients look the
coordinator up again. Group membership (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) is not served
yet, so commits are those of consumers that assign partitions themselves (generation -1); a
commit naming a generation is accepted as well (there is no generation to check it against).
Commit metadata and leader epochs are not kept. Transaction coordinators (key type 1) do not
exist: COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from kafka.protocol.consumer import OffsetCommitResponse, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorResponse

from common.kaska.errors import KaskaError, NotLeaderError
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.handlers.common import partition_log
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import (
    COORDINATOR_NOT_AVAILABLE,
    INVALID_GROUP_ID,
    NONE,
    NOT_COORDINATOR,
    kafka_code,
)
from services.broker.kafka.metadata import leader_for
from services.broker.offsets import OFFSETS_PARTITION, validate_group

GROUP_KEY_TYPE = 0
NO_OFFSET = -1
NO_NODE = -1

CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
CommitPartition = CommitTopic.OffsetCommitResponsePartition
FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
FetchPartition = FetchTopic.OffsetFetchResponsePartition


def _code(error: KaskaError) -> int:
    return NOT_COORDINATOR if isinstance(error, NotLeaderError) else kafka_code(error)


def handle_find(kctx: KafkaContext, request) -> FindCoordinatorResponse:
    answer = FindCoordinatorResponse(throttle_time_ms=0, error_code=NONE, error_message=None,
                                     node_id=NO_NODE, host="", port=-1)
    leader, _epoch = leader_for(kctx, OFFSETS_TOPIC, OFFSETS_PARTITION)
    broker = kctx.kafka_broker(leader)
    if request.key_type != GROUP_KEY_TYPE or broker is None:
        answer.error_code = COORDINATOR_NOT_AVAILABLE
        answer.error_message = ("no transaction coordinators" if request.key_type
                                != GROUP_KEY_TYPE else "no leader of the offsets topic yet")
        return answer
    answer.node_id, answer.host, answer.port = broker.node_id, broker.host, broker.port
    return answer


def _group_error(kctx: KafkaContext, group: str) -> int:
    """NONE when this broker coordinates a valid `group` now, else the code to answer."""
    try:
        validate_group(group)
    except KaskaError:
        return INVALID_GROUP_ID
    try:
        kctx.broker.replicas.require_leader(OFFSETS_TOPIC, OFFSETS_PARTITION)
    except KaskaError as error:
        return _code(error)
    return NONE


def handle_commit(kctx: KafkaContext, request) -> OffsetCommitResponse:
    group_error = _group_error(kctx, request.group_id)
    topics = []
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            answer = CommitPartition(partition_index=wanted.partition_index,
                                     error_code=group_error)
            if group_error == NONE:
                answer.error_code = _commit(kctx, request.group_id, topic.name, wanted)
            answers.append(answer)
        topics.append(CommitTopic(name=topic.name, partitions=answers))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def _commit(kctx: KafkaContext, group: str, topic: str, wanted) -> int:
    ctx = kctx.broker
    try:
        partition_log(ctx, topic, wanted.partition_index)
        if wanted.committed_offset < 0:
            return NONE  # Kafka's "no offset": nothing to keep
        ctx.offsets.commit(group, topic, wanted.partition_index, wanted.committed_offset)
    except KaskaError as error:
        return _code(error)
    return NONE


def handle_fetch(kctx: KafkaContext, request) -> OffsetFetchResponse:
    group = request.group_id
    group_error = _group_error(kctx, group)
    offsets = kctx.broker.offsets
    if request.topics is None:  # every partition the group committed
        wanted: dict[str, list[int]] = {}
        if group_error == NONE:
            for (g, topic, partition) in offsets.all_committed():
                if g == group:
                    wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {topic.name: list(topic.partition_indexes) for topic in request.topics}
    topics = []
    for topic, partitions in wanted.items():
        answers = []
        for index in partitions:
            committed = offsets.committed(group, topic, index) if group_error == NONE else None
            answers.append(FetchPartition(
                partition_index=index, committed_leader_epoch=-1, metadata="",
                committed_offset=NO_OFFSET if committed is None else committed,
                error_code=NONE if request.version >= 2 else group_error))
        topics.append(FetchTopic(name=topic, partitions=answers))
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=group_error)
