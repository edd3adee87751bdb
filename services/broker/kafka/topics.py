"""CreateTopics (api key 19, v2..7) and DeleteTopics (api key 20, v1..5), through the same
journaled path as Kaska's CREATE_TOPIC / DELETE_TOPIC (cluster/replica_manager.py): answered once a
majority has the entry. Only the controller -- the cluster's leader, as Metadata names it --
takes them; elsewhere NOT_CONTROLLER sends clients there. Every broker holds every partition,
so the replication factor is the cluster's: -1 or any count up to the brokers' is accepted,
more is INVALID_REPLICATION_FACTOR. Explicit replica assignments are refused.

Topic configs: the ones Kaska has per topic (cluster/topic_configs.py: retention.ms,
retention.bytes, segment.bytes) are stored before the topic is created and answered back, from
v5, with the topic's other configs (describe_configs.py); any other key refuses the topic with
INVALID_CONFIG and a message naming every refused key, as does a bad value. validate_only
checks them and creates nothing.
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import CreateTopicsResponse, DeleteTopicsResponse

from common.kaska.errors import (
    InvalidRequestError,
    KaskaError,
    NotEnoughReplicasError,
    NotLeaderError,
    TopicAlreadyExistsError,
)
from services.broker.cluster import topic_configs
from services.broker.handlers.common import client_writable_topic
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.describe_configs import topic_entries
from services.broker.kafka.errors import (
    INVALID_CONFIG,
    INVALID_REPLICATION_FACTOR,
    NONE,
    kafka_code,
)

log = logging.getLogger(__name__)

NOT_CONTROLLER = 41
DEFAULT_PARTITIONS = 1
DEFAULT_REPLICATION = -1

Created = CreateTopicsResponse.CreatableTopicResult
Deleted = DeleteTopicsResponse.DeletableTopicResult
ResultConfig = Created.CreatableTopicConfigs


def _code(error: KaskaError) -> int:
    if isinstance(error, topic_configs.InvalidTopicConfigError):
        return INVALID_CONFIG
    return NOT_CONTROLLER if isinstance(error, NotLeaderError) else kafka_code(error)


def handle_create(kctx: KafkaContext, request) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        throttle_time_ms=0,
        topics=[_create(kctx, topic, request.validate_only) for topic in request.topics])


def _create(kctx: KafkaContext, topic, validate_only: bool):
    partitions = DEFAULT_PARTITIONS if topic.num_partitions == -1 else topic.num_partitions
    replication = topic.replication_factor
    result = Created(name=topic.name, error_code=NONE, error_message=None,
                     num_partitions=partitions, replication_factor=replication, configs=[])
    try:
        client_writable_topic(topic.name)
        if topic.assignments:
            raise InvalidRequestError("replica assignments are not supported")
        settings = topic_configs.parse(((c.name, c.value) for c in topic.configs),
                                       kctx.broker.config.storage)
        if replication != DEFAULT_REPLICATION and not 1 <= replication <= len(kctx.brokers):
            result.error_code = INVALID_REPLICATION_FACTOR
            result.error_message = (f"replication factor {replication}: every partition is on "
                                    f"all {len(kctx.brokers)} brokers")
            return result
        if not validate_only:
            _create_with(kctx, topic.name, partitions, settings)
        result.configs = [ResultConfig(name=c.name, value=c.value, read_only=c.read_only,
                                       config_source=c.source, is_sensitive=False)
                          for c in topic_entries(kctx, settings)]
    except KaskaError as error:
        result.error_code = _code(error)
        result.error_message = str(error)
        log.info("kafka CreateTopics of %r refused: %s", topic.name, error)
    return result


def _create_with(kctx: KafkaContext, name: str, partitions: int, settings: dict[str, int]):
    """Create the topic with its settings stored first; if the create fails before the topic
    exists, the settings are taken back (best effort: a later create of the name rewrites
    them all anyway)."""
    configs = kctx.broker.topic_configs
    prepared = []

    def prepare() -> None:
        configs.prepare(name, settings)
        prepared.append(name)

    try:
        kctx.broker.topics.create_topic(name, partitions, prepare=prepare)
    except (NotEnoughReplicasError, TopicAlreadyExistsError):
        # Created, some replication group has not opened it yet; or another create of the
        # name won: either way the settings now belong to a topic.
        raise
    except KaskaError:
        if prepared and settings:
            _take_back(configs, name)
        raise


def _take_back(configs, name: str) -> None:
    try:
        configs.prepare(name, {})
    except KaskaError as error:
        log.info("settings of topic %r not taken back after its failed create: %s", name, error)


def handle_delete(kctx: KafkaContext, request) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(
        throttle_time_ms=0, responses=[_delete(kctx, name) for name in request.topic_names])


def _delete(kctx: KafkaContext, name: str):
    result = Deleted(name=name, error_code=NONE, error_message=None)
    try:
        client_writable_topic(name)
        kctx.broker.topics.delete_topic(name, kctx.broker.offsets.forget_topic)
    except KaskaError as error:
        result.error_code = _code(error)
        result.error_message = str(error)
    return result
