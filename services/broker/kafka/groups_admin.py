"""ListGroups (api key 16, v0..5) and DescribeGroups (15, v0..6): the consumer groups this
broker coordinates, as `kafka-consumer-groups --list / --describe` and AdminClients read them.

The coordinator of every group is the leader of `__offsets` partition 0 (coordinator.py). So,
as in Kafka, where each broker lists the groups it coordinates and AdminClients ask every broker
and join the lists: ListGroups on any other broker answers an empty list (no error), and
DescribeGroups answers NOT_COORDINATOR per group (the client looks the coordinator up again).

A group is listed when it has members (consumer_groups.py) or committed offsets (Kaska's
`__offsets` table, cluster/committed_offsets.py), as Kafka lists groups that only kept offsets.
Those offset-only groups are Empty, with protocol type "consumer": Kaska forgets a group's
membership with its last member, so it cannot tell a group that once had members (Kafka keeps
"consumer") from one that only ever committed (Kafka's ""); nearly every committing group is
the former. A group neither live nor with offsets is Dead, as Kafka describes unknown groups
(from DescribeGroups v6, GROUP_ID_NOT_FOUND with a message, as KIP-1043 has it).

Group types (ListGroups v5's filter): every group here is "classic" (no KIP-848 groups).
"""

from __future__ import annotations

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse

from common.kaska.errors import KaskaError
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import OFFSETS_PARTITION, validate_group
from services.broker.kafka.consumer_groups import GroupDescription, GroupState
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import (
    GROUP_ID_NOT_FOUND,
    INVALID_GROUP_ID,
    NONE,
    NOT_COORDINATOR,
)

# Kafka's names for the group states (GroupState.toString in Kafka's coordinator).
STATE_NAMES: dict[GroupState, str] = {
    GroupState.EMPTY: "Empty",
    GroupState.PREPARING_REBALANCE: "PreparingRebalance",
    GroupState.COMPLETING_REBALANCE: "CompletingRebalance",
    GroupState.STABLE: "Stable",
}
DEAD = "Dead"
CLASSIC = "classic"
CONSUMER_PROTOCOL = "consumer"

Listed = ListGroupsResponse.ListedGroup
Described = DescribeGroupsResponse.DescribedGroup
DescribedMember = Described.DescribedGroupMember


def coordinates(kctx: KafkaContext) -> bool:
    """Whether this broker coordinates the groups now (it leads `__offsets` with its lease)."""
    try:
        kctx.broker.replication.require_leader(OFFSETS_TOPIC, OFFSETS_PARTITION)
    except KaskaError:
        return False
    return True


def known_groups(kctx: KafkaContext) -> dict[str, GroupDescription]:
    """Every group this broker knows: the live ones, then the offset-only ones as Empty."""
    groups = {group.group_id: group for group in kctx.consumer_groups.describe_all()}
    for group_id, _topic, _partition in kctx.broker.offsets.all_committed():
        if group_id not in groups:
            groups[group_id] = _offsets_only(group_id)
    return groups


def _offsets_only(group_id: str) -> GroupDescription:
    return GroupDescription(group_id, GroupState.EMPTY, CONSUMER_PROTOCOL, "", ())


def handle_list(kctx: KafkaContext, request) -> ListGroupsResponse:
    groups = known_groups(kctx) if coordinates(kctx) else {}
    states = {s.lower() for s in request.states_filter or ()} if request.version >= 4 else set()
    types = {t.lower() for t in request.types_filter or ()} if request.version >= 5 else set()
    listed = [
        Listed(
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=STATE_NAMES[g.state],
            group_type=CLASSIC,
        )
        for g in groups.values()
        if (not states or STATE_NAMES[g.state].lower() in states)
        and (not types or CLASSIC in types)
    ]
    return ListGroupsResponse(throttle_time_ms=0, error_code=NONE, groups=listed)


def handle_describe(kctx: KafkaContext, request) -> DescribeGroupsResponse:
    coordinator = coordinates(kctx)
    groups = known_groups(kctx) if coordinator else {}
    return DescribeGroupsResponse(
        throttle_time_ms=0,
        groups=[
            _described(group_id, coordinator, groups.get(group_id), request.version)
            for group_id in request.groups
        ],
    )


def _described(group_id: str, coordinator: bool, group: GroupDescription | None, version: int):
    answer = Described(
        error_code=NONE,
        error_message=None,
        group_id=group_id,
        group_state="",
        protocol_type="",
        protocol_data="",
        members=[],
    )
    try:
        validate_group(group_id)
    except KaskaError as error:
        answer.error_code, answer.error_message = INVALID_GROUP_ID, str(error)
        return answer
    if not coordinator:
        answer.error_code = NOT_COORDINATOR
        answer.error_message = "this broker does not lead the offsets topic"
        return answer
    if group is None:
        answer.group_state = DEAD
        if version >= 6:
            answer.error_code = GROUP_ID_NOT_FOUND
            answer.error_message = f"group {group_id!r} has no members and no committed offsets"
        return answer
    answer.group_state = STATE_NAMES[group.state]
    answer.protocol_type = group.protocol_type
    answer.protocol_data = group.protocol_name
    answer.members = [
        DescribedMember(
            member_id=m.member_id,
            group_instance_id=None,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata,
            member_assignment=m.assignment,
        )
        for m in group.members
    ]
    return answer
