"""The admin APIs' answers (groups_admin.py, describe_configs.py, metadata.py's DescribeCluster,
topics.py's CreateTopics configs) over a stand-in broker: each answer's content, and every
offered version encoding and decoding through requests.answer."""

from __future__ import annotations

import struct
import threading
from types import SimpleNamespace

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from common.kaska.errors import NotLeaderError
from common.kaska.protocol.metadata import BrokerInfo
from services.broker.cluster.committed_offsets import CommittedOffsets
from services.broker.cluster.partition import PartitionRole
from services.broker.cluster.topic_configs import TopicConfigs
from services.broker.config import BrokerConfig
from services.broker.kafka import requests
from services.broker.kafka.consumer_groups import GroupCoordinator
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.describe_configs import (
    BROKER,
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC,
)
from services.broker.kafka.errors import (
    GROUP_ID_NOT_FOUND,
    INVALID_CONFIG,
    INVALID_GROUP_ID,
    INVALID_REQUEST,
    NONE,
    NOT_COORDINATOR,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_ENDPOINT_TYPE,
)
from services.broker.metrics import BrokerCounters
from services.broker.replication.committed_topics import LiveTopic
from services.broker.replication.config import ReplicationConfig
from services.broker.replication.journal import TopicId
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

WAIT_S = 10.0
PROTOCOLS = (("range", b"range-subscription"), ("roundrobin", b"rr-subscription"))
RETENTION_MS = 3_600_000


class StandInTopics:
    """TopicAdmin's surface: committed topics, and creates recorded (settings prepared
    first, as TopicAdmin does)."""

    def __init__(self) -> None:
        self.live: dict[str, LiveTopic] = {}
        self.fail_after_prepare: Exception | None = None  # a create that fails after it

    def committed_topics(self) -> dict[str, LiveTopic]:
        return dict(self.live)

    def create_topic(self, name: str, partitions: int, prepare=None) -> TopicId:
        if prepare is not None and name not in self.live:
            prepare()
        if self.fail_after_prepare is not None:
            raise self.fail_after_prepare
        self.live[name] = LiveTopic(TopicId(1, len(self.live) + 1), partitions)
        return self.live[name].topic_id


class StandInReplication:
    def __init__(self) -> None:
        self.coordinator = True

    def require_leader(self, topic: str, partition: int):
        if not self.coordinator:
            raise NotLeaderError("broker 2 leads __offsets")

    def controller_role(self) -> PartitionRole:
        return PartitionRole(True, 1, 4, "127.0.0.1:9092")


@pytest.fixture
def kctx(tmp_path):
    storage_config = LogConfig(segment_bytes_max=1024 * 1024, retention_ms=RETENTION_MS)
    config = BrokerConfig(
        data_dir=tmp_path, replication=ReplicationConfig(node_id=1), storage=storage_config
    )
    storage = Log(tmp_path / "data", config.storage)
    offsets = CommittedOffsets(storage)
    offsets.load()
    topic_configs = TopicConfigs(offsets, config.storage)
    topic_configs.attach([storage])
    broker = SimpleNamespace(
        config=config,
        offsets=offsets,
        topics=StandInTopics(),
        replication=StandInReplication(),
        metrics=BrokerCounters(),
        topic_configs=topic_configs,
    )
    yield KafkaContext(
        broker=broker,
        node_id=1,
        brokers=(
            BrokerInfo(1, "127.0.0.1", 19092),
            BrokerInfo(2, "127.0.0.1", 19093),
            BrokerInfo(3, "127.0.0.1", 19094),
        ),
        cluster_id="kaska-test",
        rng=None,
        consumer_groups=GroupCoordinator(initial_rebalance_delay_s=0.0),
    )
    storage.close()


def ask(kctx, request, response_class):
    """The decoded answer of one request sent through requests.answer, as a client sees it."""
    version = request.version
    request.with_header(correlation_id=9, client_id="admin-test")
    frame = requests.answer(kctx, bytes(request.encode(header=True)), peer="10.0.0.7:5555")
    flexible = request.flexible_version_q(version)
    body = frame[4 + 4 + (1 if flexible else 0) :]
    assert struct.unpack_from(">i", frame, 4)[0] == 9
    return response_class.decode(body, version=version)


def stable_group(kctx, group_id: str = "g") -> str:
    """One member joined and synced: the group is Stable. Its member id."""
    joined = kctx.consumer_groups.join(
        group_id, "", 10_000, 10_000, "consumer", PROTOCOLS, client=("client-a", "/10.0.0.7")
    )
    assert joined.error_code == NONE
    error, _assignment = kctx.consumer_groups.sync(
        group_id, joined.member_id, joined.generation, {joined.member_id: b"assigned"}
    )
    assert error == NONE
    return joined.member_id


# -- ListGroups / DescribeGroups --------------------------------------------------------------


@pytest.mark.parametrize("version", range(6))
def test_list_groups_names_live_and_offset_only_groups_at_every_version(kctx, version):
    stable_group(kctx, "live")
    kctx.broker.offsets.commit("committed-only", "t", 0, 5)
    kwargs = {"states_filter": []} if version >= 4 else {}
    kwargs |= {"types_filter": []} if version >= 5 else {}
    answer = ask(kctx, ListGroupsRequest[version](**kwargs), ListGroupsResponse)
    assert answer.error_code == NONE
    listed = {
        g.group_id: (g.protocol_type, g.group_state if version >= 4 else None)
        for g in answer.groups
    }
    assert listed == {
        "live": ("consumer", "Stable" if version >= 4 else None),
        "committed-only": ("consumer", "Empty" if version >= 4 else None),
    }


def test_list_groups_filters_by_state_and_type(kctx):
    stable_group(kctx, "live")
    kctx.broker.offsets.commit("committed-only", "t", 0, 5)
    empty = ask(kctx, ListGroupsRequest[4](states_filter=["EMPTY"]), ListGroupsResponse)
    assert [g.group_id for g in empty.groups] == ["committed-only"]
    share = ask(
        kctx, ListGroupsRequest[5](states_filter=[], types_filter=["share"]), ListGroupsResponse
    )
    assert share.groups == []


def test_a_broker_that_does_not_coordinate_lists_no_group(kctx):
    kctx.broker.offsets.commit("committed-only", "t", 0, 5)
    kctx.broker.replication.coordinator = False
    answer = ask(kctx, ListGroupsRequest[3](), ListGroupsResponse)
    assert (answer.error_code, answer.groups) == (NONE, [])


@pytest.mark.parametrize("version", range(7))
def test_describe_groups_shows_members_assignments_and_states(kctx, version):
    member_id = stable_group(kctx, "live")
    kctx.broker.offsets.commit("committed-only", "t", 0, 5)
    answer = ask(
        kctx,
        DescribeGroupsRequest[version](
            groups=["live", "committed-only", "unknown"], include_authorized_operations=False
        ),
        DescribeGroupsResponse,
    )
    live, committed, unknown = answer.groups
    assert (live.error_code, live.group_state, live.protocol_type, live.protocol_data) == (
        NONE,
        "Stable",
        "consumer",
        "range",
    )
    [member] = live.members
    assert (member.member_id, member.client_id, member.client_host) == (
        member_id,
        "client-a",
        "/10.0.0.7",
    )
    assert (member.member_metadata, member.member_assignment) == (
        b"range-subscription",
        b"assigned",
    )
    assert (committed.group_state, committed.members) == ("Empty", [])
    assert (unknown.error_code, unknown.group_state) == (
        GROUP_ID_NOT_FOUND if version >= 6 else NONE,
        "Dead",
    )


def test_a_group_in_its_rebalance_is_described_as_preparing(kctx):
    coordinator = kctx.consumer_groups
    first = stable_group(kctx, "g")
    joining = threading.Thread(
        target=coordinator.join, daemon=True, args=("g", "", 10_000, 10_000, "consumer", PROTOCOLS)
    )
    joining.start()  # waits for the first member to rejoin
    described = None
    for _ in range(200):
        described = coordinator.describe("g")
        if len(described.members) == 2:
            break
        joining.join(0.01)
    assert described.state.name == "PREPARING_REBALANCE" and len(described.members) == 2
    answer = ask(
        kctx,
        DescribeGroupsRequest[5](groups=["g"], include_authorized_operations=False),
        DescribeGroupsResponse,
    )
    assert answer.groups[0].group_state == "PreparingRebalance"
    # The first member rejoins: the rebalance completes for both.
    assert coordinator.join("g", first, 10_000, 10_000, "consumer", PROTOCOLS).error_code == NONE
    joining.join(WAIT_S)
    assert not joining.is_alive()
    assert coordinator.describe("g").state.name == "COMPLETING_REBALANCE"


def test_the_client_of_a_kafka_join_is_its_header_client_id_and_peer_host(kctx):
    from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

    join = JoinGroupRequest[5](
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequest[5].JoinGroupRequestProtocol(name="range", metadata=b"m")],
    )
    joined = ask(kctx, join, JoinGroupResponse)
    assert joined.error_code == NONE
    [member] = kctx.consumer_groups.describe("g").members
    assert (member.client_id, member.client_host) == ("admin-test", "/10.0.0.7")


def test_describe_groups_elsewhere_is_not_coordinator_and_bad_ids_are_invalid(kctx):
    answer = ask(
        kctx,
        DescribeGroupsRequest[5](groups=[""], include_authorized_operations=False),
        DescribeGroupsResponse,
    )
    assert answer.groups[0].error_code == INVALID_GROUP_ID
    kctx.broker.replication.coordinator = False
    answer = ask(
        kctx,
        DescribeGroupsRequest[5](groups=["g"], include_authorized_operations=False),
        DescribeGroupsResponse,
    )
    assert answer.groups[0].error_code == NOT_COORDINATOR


# -- DescribeConfigs ----------------------------------------------------------------------------


def describe(kctx, version, *resources, synonyms=False):
    Resource = DescribeConfigsRequest[version].DescribeConfigsResource
    kwargs = {"include_documentation": False} if version >= 3 else {}
    return ask(
        kctx,
        DescribeConfigsRequest[version](
            resources=[
                Resource(resource_type=kind, resource_name=name, configuration_keys=keys)
                for kind, name, keys in resources
            ],
            include_synonyms=synonyms,
            **kwargs,
        ),
        DescribeConfigsResponse,
    ).results


@pytest.mark.parametrize("version", range(1, 5))
def test_a_topics_configs_show_its_own_settings_and_the_brokers(kctx, version):
    kctx.broker.topic_configs.prepare("t", {"segment.bytes": 65536})
    kctx.broker.topics.create_topic("t", 2)
    [result] = describe(kctx, version, (TOPIC, "t", None))
    assert result.error_code == NONE
    configs = {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}
    assert configs["segment.bytes"] == ("65536", DYNAMIC_TOPIC_CONFIG, False)
    assert configs["retention.ms"] == (str(RETENTION_MS), STATIC_BROKER_CONFIG, False)
    assert configs["retention.bytes"] == ("-1", DEFAULT_CONFIG, False)
    assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG, True)
    assert configs["min.insync.replicas"] == ("2", DEFAULT_CONFIG, True)  # 2 of 3 brokers
    assert configs["max.message.bytes"][0] == str(kctx.broker.config.storage.batch_bytes_max)


def test_synonyms_name_the_broker_setting_a_topic_config_comes_from(kctx):
    kctx.broker.topic_configs.prepare("t", {"retention.bytes": 1000})
    kctx.broker.topics.create_topic("t", 1)
    [result] = describe(kctx, 4, (TOPIC, "t", ["retention.bytes", "retention.ms"]), synonyms=True)
    chains = {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in result.configs}
    assert chains == {
        "retention.bytes": [
            ("retention.bytes", "1000", DYNAMIC_TOPIC_CONFIG),
            ("log.retention.bytes", "-1", DEFAULT_CONFIG),
        ],
        "retention.ms": [("log.retention.ms", str(RETENTION_MS), STATIC_BROKER_CONFIG)],
    }


def test_this_brokers_configs_and_refusals(kctx):
    kctx.broker.topics.create_topic("t", 1)
    mine, other, cluster, unknown, internal, logger = describe(
        kctx,
        4,
        (BROKER, "1", None),
        (BROKER, "2", None),
        (BROKER, "", None),
        (TOPIC, "nope", None),
        (TOPIC, "__offsets", None),
        (8, "1", None),
    )
    configs = {c.name: (c.value, c.config_source, c.read_only) for c in mine.configs}
    assert configs["log.retention.ms"] == (str(RETENTION_MS), STATIC_BROKER_CONFIG, True)
    assert configs["log.segment.bytes"] == (str(1024 * 1024), STATIC_BROKER_CONFIG, True)
    assert configs["log.retention.bytes"] == ("-1", DEFAULT_CONFIG, True)
    assert configs["advertised.listeners"][0] == "PLAINTEXT://127.0.0.1:19092"
    assert all(read_only for _v, _s, read_only in configs.values())
    assert other.error_code == INVALID_REQUEST and "broker 1" in other.error_message
    assert (cluster.error_code, cluster.configs) == (NONE, [])
    assert unknown.error_code == internal.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert logger.error_code == INVALID_REQUEST


# -- DescribeCluster ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster_names_the_brokers_and_the_controller(kctx, version):
    kwargs = {"endpoint_type": 1} if version >= 1 else {}
    kwargs |= {"include_fenced_brokers": True} if version >= 2 else {}
    answer = ask(
        kctx,
        DescribeClusterRequest[version](include_cluster_authorized_operations=False, **kwargs),
        DescribeClusterResponse,
    )
    assert (answer.error_code, answer.cluster_id, answer.controller_id) == (NONE, "kaska-test", 1)
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [
        (1, "127.0.0.1", 19092),
        (2, "127.0.0.1", 19093),
        (3, "127.0.0.1", 19094),
    ]


def test_describe_cluster_of_the_controllers_is_refused_as_a_broker_does(kctx):
    answer = ask(
        kctx,
        DescribeClusterRequest[1](include_cluster_authorized_operations=False, endpoint_type=2),
        DescribeClusterResponse,
    )
    assert answer.error_code == UNSUPPORTED_ENDPOINT_TYPE and answer.brokers == []


# -- CreateTopics with configs -----------------------------------------------------------------


def create(kctx, version, name, configs, validate_only=False):
    Topic = CreateTopicsRequest[version].CreatableTopic
    Config = Topic.CreatableTopicConfig
    [result] = ask(
        kctx,
        CreateTopicsRequest[version](
            topics=[
                Topic(
                    name=name,
                    num_partitions=1,
                    replication_factor=-1,
                    assignments=[],
                    configs=[Config(name=k, value=v) for k, v in configs.items()],
                )
            ],
            timeout_ms=5000,
            validate_only=validate_only,
        ),
        CreateTopicsResponse,
    ).topics
    return result


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_stores_the_supported_configs(kctx, version):
    result = create(kctx, version, "t", {"retention.ms": "60000", "segment.bytes": "4096"})
    assert result.error_code == NONE and "t" in kctx.broker.topics.live
    assert kctx.broker.topic_configs.settings("t") == {"retention.ms": 60000, "segment.bytes": 4096}
    if version >= 5:
        shown = {c.name: (c.value, c.config_source) for c in result.configs}
        assert shown["retention.ms"] == ("60000", DYNAMIC_TOPIC_CONFIG)


def test_create_topics_refuses_unsupported_configs_naming_them(kctx):
    result = create(
        kctx, 7, "t", {"retention.ms": "1", "compression.type": "lz4", "min.insync.replicas": "2"}
    )
    assert result.error_code == INVALID_CONFIG
    assert "compression.type, min.insync.replicas" in result.error_message
    assert "t" not in kctx.broker.topics.live
    assert kctx.broker.topic_configs.settings("t") == {}


def test_validate_only_checks_configs_and_creates_nothing(kctx):
    assert (
        create(kctx, 7, "t", {"retention.bytes": "many"}, validate_only=True).error_code
        == INVALID_CONFIG
    )
    assert create(kctx, 7, "t", {"retention.bytes": "1000"}, validate_only=True).error_code == NONE
    assert "t" not in kctx.broker.topics.live and kctx.broker.topic_configs.settings("t") == {}


def test_a_create_that_fails_takes_its_settings_back(kctx):
    kctx.broker.topics.fail_after_prepare = NotLeaderError("broker 2 leads the metadata group")
    result = create(kctx, 7, "t", {"retention.bytes": "1000"})
    assert result.error_code == 41  # NOT_CONTROLLER: the client asks the controller again
    assert "t" not in kctx.broker.topics.live
    assert kctx.broker.topic_configs.settings("t") == {}
