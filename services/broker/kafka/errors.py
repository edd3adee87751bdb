"""Kafka's error codes, and how Kaska's errors answer in them.

Kaska's wire codes were modelled on Kafka's and mostly coincide (1, 2, 3, 6, 7, 10, 17, 19, 35,
36, 37, 42, 45, 46, 56); the few that mean something else in Kafka (Kaska's 11, 43, 47, 48, 49,
58) are mapped explicitly, and anything unknown answers UNKNOWN_SERVER_ERROR (-1). Kafka clients
retry exactly the codes Kafka calls retriable, so a NOT_LEADER_OR_FOLLOWER here makes them
refresh their metadata and follow the new leader.

Pure; thread-safe.
"""

from __future__ import annotations

from common.kaska.errors import (
    AuthenticationError,
    CorruptBatchError,
    DuplicateSequenceError,
    FrameTooLargeError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    KaskaError,
    KaskaStorageError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
SASL_AUTHENTICATION_FAILED = 58
KAFKA_STORAGE_ERROR = 56
GROUP_ID_NOT_FOUND = 69
FETCH_SESSION_ID_NOT_FOUND = 70
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNSUPPORTED_COMPRESSION_TYPE = 76
OFFSET_NOT_AVAILABLE = 78
INVALID_RECORD = 87
UNSUPPORTED_ENDPOINT_TYPE = 119

# Kaska error class -> Kafka code, where the numbers differ or the meaning is narrower.
_BY_CLASS: dict[type[KaskaError], int] = {
    OffsetOutOfRangeError: OFFSET_OUT_OF_RANGE,
    CorruptBatchError: CORRUPT_MESSAGE,
    UnknownTopicOrPartitionError: UNKNOWN_TOPIC_OR_PARTITION,
    NotLeaderError: NOT_LEADER_OR_FOLLOWER,
    RequestTimedOutError: REQUEST_TIMED_OUT,
    MessageTooLargeError: MESSAGE_TOO_LARGE,
    FrameTooLargeError: MESSAGE_TOO_LARGE,
    InvalidTopicError: INVALID_TOPIC_EXCEPTION,
    NotEnoughReplicasError: NOT_ENOUGH_REPLICAS,
    UnsupportedVersionError: UNSUPPORTED_VERSION,
    TopicAlreadyExistsError: TOPIC_ALREADY_EXISTS,
    InvalidPartitionsError: INVALID_PARTITIONS,
    InvalidRequestError: INVALID_REQUEST,
    OutOfOrderSequenceError: OUT_OF_ORDER_SEQUENCE_NUMBER,
    DuplicateSequenceError: DUPLICATE_SEQUENCE_NUMBER,
    KaskaStorageError: KAFKA_STORAGE_ERROR,
    OffsetNotAvailableError: OFFSET_NOT_AVAILABLE,
    AuthenticationError: SASL_AUTHENTICATION_FAILED,
}


class KafkaProtocolError(KaskaError):
    """A request the Kafka listener refuses; `kafka_code` is the Kafka error code it answers."""

    kafka_code = INVALID_REQUEST

    def __init__(self, message: str, kafka_code: int | None = None) -> None:
        super().__init__(message)
        if kafka_code is not None:
            self.kafka_code = kafka_code


class MalformedRequestError(KafkaProtocolError):
    """A request frame whose header or body does not parse."""

    kafka_code = INVALID_REQUEST


class UnsupportedApiError(KafkaProtocolError):
    """An api key this listener does not serve, or a version outside its range."""

    kafka_code = UNSUPPORTED_VERSION


class UnsupportedRecordsError(KafkaProtocolError):
    """Records this listener does not store: transactional or control batches, an unknown
    compression codec, old message formats (magic 0 and 1)."""


def kafka_code(error: KaskaError) -> int:
    """The Kafka error code answering `error`."""
    if isinstance(error, KafkaProtocolError):
        return error.kafka_code
    for cls in type(error).__mro__:
        code = _BY_CLASS.get(cls)
        if code is not None:
            return code
    return UNKNOWN_SERVER_ERROR
