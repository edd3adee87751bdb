"""The group coordinator's APIs: FindCoordinator (api key 10, v0..3), JoinGroup (11, v0..9),
Heartbeat (12, v0..4), LeaveGroup (13, v0..5), SyncGroup (14, v0..5), OffsetCommit (8, v2..9)
and OffsetFetch (9, v1..7).

Committed offsets are kept in Kaska's own table (cluster/committed_offsets.py, the `__offsets`
topic), so an offset committed through either protocol is read back through both. Membership is
consumer_groups.py's.

The coordinator of every group is the leader of `__offsets` partition 0 -- where Kaska's
COMMIT_OFFSET goes too; elsewhere the group APIs answer NOT_COORDINATOR, and clients look the
coordinator up again. A commit from a group member must name its current generation
(ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID otherwise, and the client rejoins); one outside the
group protocol (generation -1: a consumer that assigns itself) is accepted while the group has
no members. Commit metadata and leader epochs are not kept. Transaction coordinators (key type
1) do not exist: COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from common.kaska.errors import KaskaError, NotLeaderError
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import OFFSETS_PARTITION, validate_group
from services.broker.handlers.common import find_partition
from services.broker.kafka.context import REQUEST_PEER, KafkaContext
from services.broker.kafka.errors import (
    COORDINATOR_NOT_AVAILABLE,
    INVALID_GROUP_ID,
    NONE,
    NOT_COORDINATOR,
    kafka_code,
)
from services.broker.kafka.metadata import leader_for

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
        kctx.broker.replication.require_leader(OFFSETS_TOPIC, OFFSETS_PARTITION)
    except KaskaError as error:
        return _code(error)
    return NONE


def handle_commit(kctx: KafkaContext, request) -> OffsetCommitResponse:
    group_error = _group_error(kctx, request.group_id)
    if group_error == NONE:
        group_error = kctx.consumer_groups.check_commit(request.group_id, request.member_id,
                                               request.generation_id_or_member_epoch)
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
        find_partition(ctx, topic, wanted.partition_index)
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


def handle_join(kctx: KafkaContext, request) -> JoinGroupResponse:
    error = _group_error(kctx, request.group_id)
    if error != NONE:
        return JoinGroupResponse(throttle_time_ms=0, error_code=error, generation_id=-1,
                                 protocol_type=None,
                                 protocol_name=None if request.version >= 7 else "",
                                 leader="", member_id=request.member_id, members=[])
    # v0 has no rebalance timeout: the session timeout serves as both, as in Kafka.
    rebalance_ms = request.rebalance_timeout_ms if request.version >= 1 else \
        request.session_timeout_ms
    answer = kctx.consumer_groups.join(
        request.group_id, request.member_id, request.session_timeout_ms, rebalance_ms,
        request.protocol_type, tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        client=_client_of(request))
    Member = JoinGroupResponse.JoinGroupResponseMember
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=answer.error_code, generation_id=answer.generation,
        protocol_type=request.protocol_type,
        # Nullable from v7 only: older versions get "" when there is no protocol (an error).
        protocol_name=answer.protocol_name if answer.protocol_name is not None or
        request.version >= 7 else "",
        leader=answer.leader, skip_assignment=False, member_id=answer.member_id,
        members=[Member(member_id=member_id, group_instance_id=None, metadata=metadata)
                 for member_id, metadata in answer.members])


def _client_of(request) -> tuple[str, str]:
    """(client id, "/host") of a request, as Kafka's DescribeGroups shows a member's client."""
    header = request.header
    client_id = (header.client_id if header is not None else None) or ""
    host = REQUEST_PEER.get().rpartition(":")[0]
    return client_id, f"/{host}" if host else ""


def handle_sync(kctx: KafkaContext, request) -> SyncGroupResponse:
    error = _group_error(kctx, request.group_id)
    assignment = b""
    if error == NONE:
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments} \
            if request.assignments else None
        error, assignment = kctx.consumer_groups.sync(request.group_id, request.member_id,
                                             request.generation_id, assignments)
    return SyncGroupResponse(throttle_time_ms=0, error_code=error,
                             protocol_type=request.protocol_type,
                             protocol_name=request.protocol_name, assignment=assignment)


def handle_heartbeat(kctx: KafkaContext, request) -> HeartbeatResponse:
    error = _group_error(kctx, request.group_id)
    if error == NONE:
        error = kctx.consumer_groups.heartbeat(request.group_id, request.member_id,
                                               request.generation_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


def handle_leave(kctx: KafkaContext, request) -> LeaveGroupResponse:
    error = _group_error(kctx, request.group_id)
    if request.version < 3:
        if error == NONE:
            error = kctx.consumer_groups.leave(request.group_id, request.member_id)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=error)
    Member = LeaveGroupResponse.MemberResponse
    members = [Member(member_id=m.member_id, group_instance_id=m.group_instance_id,
                      error_code=error if error != NONE else
                      kctx.consumer_groups.leave(request.group_id, m.member_id))
               for m in request.members]
    return LeaveGroupResponse(throttle_time_ms=0, error_code=error, members=members)
