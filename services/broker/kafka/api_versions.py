"""ApiVersions (api key 18): the api keys and version ranges this listener serves.

Why these ranges (docs/kafka.md, "Versions"): every client picks, per api, the highest version
both sides know, so the listener offers what librdkafka 2.x and kafka-python 3.x use, from
the lowest version whose semantics we implement, and stops below the first version that needs
something Kaska lacks: topic ids (Metadata 10, Fetch 13, Produce 13, OffsetCommit 10, DeleteTopics
6), the batched OffsetFetch of v8, FindCoordinator's batched keys of v4.

A request at an ApiVersions version above ours is answered in version 0 with
UNSUPPORTED_VERSION and the full list (KIP-511), so a newer client retries at our maximum.
"""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsResponse

from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import NONE, UNSUPPORTED_VERSION

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
DESCRIBE_CONFIGS = 32
DESCRIBE_CLUSTER = 60
OFFSET_FOR_LEADER_EPOCH = 23

# api key -> (min version, max version) served.
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (1, 9),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 7),
    FIND_COORDINATOR: (0, 3),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 5),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 4),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    DESCRIBE_CONFIGS: (1, 4),
    DESCRIBE_CLUSTER: (0, 2),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
}


def supports(api_key: int, version: int) -> bool:
    low, high = SUPPORTED.get(api_key, (1, 0))
    return low <= version <= high


def api_list() -> list:
    return [ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(SUPPORTED.items())]


def handle(_kctx: KafkaContext, _request) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=NONE, api_keys=api_list(), throttle_time_ms=0)


def unsupported_answer() -> bytes:
    """The version-0 body answering an ApiVersions request at a version we do not know."""
    return ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION,
                               api_keys=api_list()).encode()
