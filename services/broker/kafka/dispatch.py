"""Api key -> (request schema, handler). Requests and responses are decoded and encoded by
kafka-python's `kafka.protocol` schemas (generated from Kafka's own message definitions, every
version, flexible ones included); the handlers only fill in fields. A handler returns the
response, None when the request wants no answer (Produce with acks=0), or an
answers.DeferredResponse (a Produce waiting for its acks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from services.broker.kafka import (
    api_versions,
    coordinator,
    delete_records,
    describe_configs,
    fetch,
    groups_admin,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    topics,
)


@dataclass(frozen=True, slots=True)
class ApiSpec:
    request_class: type
    handle: Callable


API_SPECS: dict[int, ApiSpec] = {
    api_versions.PRODUCE: ApiSpec(ProduceRequest, produce.handle),
    api_versions.FETCH: ApiSpec(FetchRequest, fetch.handle),
    api_versions.LIST_OFFSETS: ApiSpec(ListOffsetsRequest, list_offsets.handle),
    api_versions.METADATA: ApiSpec(MetadataRequest, metadata.handle),
    api_versions.OFFSET_COMMIT: ApiSpec(OffsetCommitRequest, coordinator.handle_commit),
    api_versions.OFFSET_FETCH: ApiSpec(OffsetFetchRequest, coordinator.handle_fetch),
    api_versions.FIND_COORDINATOR: ApiSpec(FindCoordinatorRequest, coordinator.handle_find),
    api_versions.JOIN_GROUP: ApiSpec(JoinGroupRequest, coordinator.handle_join),
    api_versions.HEARTBEAT: ApiSpec(HeartbeatRequest, coordinator.handle_heartbeat),
    api_versions.LEAVE_GROUP: ApiSpec(LeaveGroupRequest, coordinator.handle_leave),
    api_versions.SYNC_GROUP: ApiSpec(SyncGroupRequest, coordinator.handle_sync),
    api_versions.API_VERSIONS: ApiSpec(ApiVersionsRequest, api_versions.handle),
    api_versions.CREATE_TOPICS: ApiSpec(CreateTopicsRequest, topics.handle_create),
    api_versions.DELETE_TOPICS: ApiSpec(DeleteTopicsRequest, topics.handle_delete),
    api_versions.DELETE_RECORDS: ApiSpec(DeleteRecordsRequest, delete_records.handle),
    api_versions.INIT_PRODUCER_ID: ApiSpec(InitProducerIdRequest, init_producer_id.handle),
    api_versions.DESCRIBE_GROUPS: ApiSpec(DescribeGroupsRequest, groups_admin.handle_describe),
    api_versions.LIST_GROUPS: ApiSpec(ListGroupsRequest, groups_admin.handle_list),
    api_versions.DESCRIBE_CONFIGS: ApiSpec(DescribeConfigsRequest, describe_configs.handle),
    api_versions.DESCRIBE_CLUSTER: ApiSpec(DescribeClusterRequest,
                                           metadata.handle_describe_cluster),
    api_versions.OFFSET_FOR_LEADER_EPOCH: ApiSpec(OffsetForLeaderEpochRequest,
                                                  offset_for_leader_epoch.handle),
}
assert set(API_SPECS) == set(api_versions.SUPPORTED)
assert all(key == spec.request_class.API_KEY for key, spec in API_SPECS.items())
assert all(api_versions.SUPPORTED[key][1] <= spec.request_class.max_version
           for key, spec in API_SPECS.items())
