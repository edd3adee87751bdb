"""DescribeConfigs (api key 32, v1..4): a topic's or this broker's settings, with Kafka's names
and the values Kaska really uses, as `kafka-configs --describe`, `kafka-topics --describe` and
UIs read them.

A topic shows the settings Kaska has per topic (cluster/topic_configs.py: retention.ms,
retention.bytes, segment.bytes -- source DYNAMIC_TOPIC_CONFIG when given at CreateTopics) and
the broker's settings that apply to it (the storage flags of services/broker/config.py --
source STATIC_BROKER_CONFIG when the flag differs from its default, else DEFAULT_CONFIG).
Kafka marks topic configs writable (AlterConfigs); Kaska sets a topic's own settings only at
CreateTopics, so those three are shown writable there and everything Kaska fixes read-only
(cleanup.policy "delete", min.insync.replicas = a majority of the brokers: Kaska commits on
a majority). A broker (resource name: its node id; any broker answers only for itself, as in
Kafka) shows its static settings, all read-only (no dynamic broker configs); the name ""
(cluster-wide dynamic defaults) has none. Other resource types (broker loggers, groups,
client metrics) are refused with INVALID_REQUEST. Values Kaska leaves unbounded read -1 (or
Long.MAX_VALUE for flush.ms), as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.admin import DescribeConfigsResponse

from common.kaska.topic_name import is_internal
from services.broker.cluster import topic_configs
from services.broker.kafka.consumer_groups import (
    INITIAL_REBALANCE_DELAY_S,
    MEMBERS_MAX,
    SESSION_TIMEOUT_MS_MAX,
    SESSION_TIMEOUT_MS_MIN,
)
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import INVALID_REQUEST, NONE, UNKNOWN_TOPIC_OR_PARTITION
from services.broker.storage.config import LogConfig

TOPIC = 2
BROKER = 4
# Kafka's ConfigSource.
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# Kafka's ConfigType.
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
LONG_MAX = 2**63 - 1
UNBOUNDED = "-1"

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    value: str
    source: int
    read_only: bool
    config_type: int
    # The broker setting it comes from, else None: (name, value, source), its synonym.
    inherited: tuple[str, str, int] | None = None


def handle(kctx: KafkaContext, request) -> DescribeConfigsResponse:
    synonyms = bool(request.include_synonyms)
    return DescribeConfigsResponse(
        throttle_time_ms=0,
        results=[_result(kctx, resource, synonyms) for resource in request.resources],
    )


def _result(kctx: KafkaContext, resource, synonyms: bool):
    answer = Result(
        error_code=NONE,
        error_message=None,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=[],
    )
    kind, name = resource.resource_type, resource.resource_name
    if kind == TOPIC:
        configs, error = topic_configs_of(kctx, name)
    elif kind == BROKER:
        configs, error = broker_configs_of(kctx, name)
    else:
        configs, error = (
            None,
            (
                INVALID_REQUEST,
                f"resource type {kind} is not described here (topics and brokers are)",
            ),
        )
    if configs is None:
        answer.error_code, answer.error_message = error
        return answer
    wanted = resource.configuration_keys
    answer.configs = [
        _entry(config, synonyms) for config in configs if wanted is None or config.name in wanted
    ]
    return answer


def _entry(config: Config, synonyms: bool):
    chain = []
    if synonyms:
        # Kafka's order: the most specific first (the topic's own, then the broker's).
        if config.inherited is None or config.source == DYNAMIC_TOPIC_CONFIG:
            chain.append(Synonym(name=config.name, value=config.value, source=config.source))
        if config.inherited is not None:
            name, value, source = config.inherited
            chain.append(Synonym(name=name, value=value, source=source))
    return Entry(
        name=config.name,
        value=config.value,
        read_only=config.read_only,
        config_source=config.source,
        is_default=config.source == DEFAULT_CONFIG,
        is_sensitive=False,
        synonyms=chain,
        config_type=config.config_type,
        documentation=None,
    )


def _source(value, default) -> int:
    return DEFAULT_CONFIG if value == default else STATIC_BROKER_CONFIG


def _bound(value: int | None) -> str:
    return UNBOUNDED if value is None else str(value)


def topic_configs_of(kctx: KafkaContext, name: str):
    """(the topic's configs, None) or (None, (error code, message))."""
    if is_internal(name) or name not in kctx.broker.topics.committed_topics():
        return None, (UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
    return topic_entries(kctx, kctx.broker.topic_configs.settings(name)), None


def topic_entries(kctx: KafkaContext, settings: dict[str, int]) -> list[Config]:
    """A topic's configs, given its own settings (topic_configs.py's names and values)."""
    base = kctx.broker.config.storage
    default = LogConfig()

    def own(name: str, broker_name: str, value: str, default_value, config_type: int) -> Config:
        inherited = (broker_name, value, _source(value, default_value))
        if name in settings:
            return Config(
                name, str(settings[name]), DYNAMIC_TOPIC_CONFIG, False, config_type, inherited
            )
        return Config(name, value, inherited[2], False, config_type, inherited)

    def broker(name: str, broker_name: str, value, default_value, config_type: int) -> Config:
        source = _source(value, default_value)
        return Config(
            name, str(value), source, True, config_type, (broker_name, str(value), source)
        )

    return [
        own(
            topic_configs.RETENTION_MS,
            "log.retention.ms",
            _bound(base.retention_ms),
            _bound(default.retention_ms),
            LONG,
        ),
        own(
            topic_configs.RETENTION_BYTES,
            "log.retention.bytes",
            _bound(base.retention_bytes),
            _bound(default.retention_bytes),
            LONG,
        ),
        own(
            topic_configs.SEGMENT_BYTES,
            "log.segment.bytes",
            str(base.segment_bytes_max),
            str(default.segment_bytes_max),
            INT,
        ),
        broker(
            "max.message.bytes",
            "message.max.bytes",
            base.batch_bytes_max,
            default.batch_bytes_max,
            INT,
        ),
        Config("cleanup.policy", "delete", DEFAULT_CONFIG, True, LIST),
        Config("min.insync.replicas", str(_majority(kctx)), DEFAULT_CONFIG, True, INT),
        Config("unclean.leader.election.enable", "false", DEFAULT_CONFIG, True, BOOLEAN),
        broker("flush.ms", "log.flush.interval.ms", _flush_ms(base), _flush_ms(default), LONG),
        broker(
            "index.interval.bytes",
            "log.index.interval.bytes",
            base.index_interval_bytes,
            default.index_interval_bytes,
            INT,
        ),
        Config("message.timestamp.type", "CreateTime", DEFAULT_CONFIG, True, STRING),
    ]


def _majority(kctx: KafkaContext) -> int:
    return len(kctx.brokers) // 2 + 1


def _flush_ms(config: LogConfig) -> int:
    return LONG_MAX if config.flush_interval_ms is None else config.flush_interval_ms


def broker_configs_of(kctx: KafkaContext, name: str):
    """(this broker's configs, None) or (None, (error code, message))."""
    if name == "":
        return [], None  # no dynamic cluster-wide defaults
    if name != str(kctx.node_id):
        return None, (
            INVALID_REQUEST,
            f"this is broker {kctx.node_id}, not {name!r}: ask that broker",
        )
    config = kctx.broker.config
    storage, default = config.storage, LogConfig()
    brokers = len(kctx.brokers)

    def fixed(name: str, value: str, config_type: int) -> Config:
        return Config(name, value, DEFAULT_CONFIG, True, config_type)

    def flag(name: str, value, default_value, config_type: int) -> Config:
        text = value if isinstance(value, str) else str(value)
        return Config(name, text, _source(value, default_value), True, config_type)

    return [
        flag("node.id", kctx.node_id, None, INT),
        flag("broker.id", kctx.node_id, None, INT),
        flag("log.dirs", str(config.data_dir), None, STRING),
        flag("advertised.listeners", _advertised_listeners(kctx, config), None, STRING),
        flag("log.retention.ms", _bound(storage.retention_ms), _bound(default.retention_ms), LONG),
        flag(
            "log.retention.bytes",
            _bound(storage.retention_bytes),
            _bound(default.retention_bytes),
            LONG,
        ),
        flag("log.segment.bytes", storage.segment_bytes_max, default.segment_bytes_max, INT),
        flag("log.flush.interval.ms", _flush_ms(storage), _flush_ms(default), LONG),
        flag("log.retention.check.interval.ms", config.retention_check_interval_ms, 60_000, LONG),
        flag("message.max.bytes", storage.batch_bytes_max, default.batch_bytes_max, INT),
        flag(
            "socket.request.max.bytes",
            config.network.frame_bytes_max,
            type(config.network)().frame_bytes_max,
            INT,
        ),
        fixed("log.index.interval.bytes", str(storage.index_interval_bytes), INT),
        fixed("min.insync.replicas", str(_majority(kctx)), INT),
        fixed("default.replication.factor", str(brokers), INT),
        fixed("offsets.topic.replication.factor", str(brokers), INT),
        fixed("offsets.topic.num.partitions", "1", INT),
        fixed("num.partitions", "1", INT),
        fixed("auto.create.topics.enable", "false", BOOLEAN),
        fixed("delete.topic.enable", "true", BOOLEAN),
        fixed("unclean.leader.election.enable", "false", BOOLEAN),
        fixed("log.cleanup.policy", "delete", LIST),
        fixed("group.initial.rebalance.delay.ms", str(int(INITIAL_REBALANCE_DELAY_S * 1000)), INT),
        fixed("group.min.session.timeout.ms", str(SESSION_TIMEOUT_MS_MIN), INT),
        fixed("group.max.session.timeout.ms", str(SESSION_TIMEOUT_MS_MAX), INT),
        fixed("group.max.size", str(MEMBERS_MAX), INT),
    ], None


def _advertised_listeners(kctx: KafkaContext, config) -> str:
    """Every listener of this broker as NAME://HOST:PORT (Kafka's advertised.listeners): the
    one this request came through as its clients are told, the others as configured (their
    advertised address, else where they are bound)."""
    me = kctx.brokers[0]
    named = [f"{kctx.listener}://{me.host}:{me.port}"]
    for spec in config.kafka.specs():
        if spec.name != kctx.listener:
            host, port = spec.advertise or spec.listen
            named.append(f"{spec.name}://{host}:{port}")
    return ",".join(named)
