"""Small steps every handler shares: read the body, check the topic, find the partition."""

from __future__ import annotations

from common.kaska.errors import InvalidTopicError
from common.kaska.topic_name import is_internal, validate_topic_name
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.replica_manager import PartitionRole


def read_request(ctx: BrokerContext, body: RequestBody, request_type):
    """Decode a whole (small) body; InvalidRequestError when it does not parse."""
    return request_type.decode(body.read_all(ctx.config.network.control_body_bytes_max))


def client_writable_topic(name: str) -> str:
    """A topic a client may create, delete or produce to: legal and not internal."""
    validate_topic_name(name)
    if is_internal(name):
        raise InvalidTopicError(f"topic {name!r} is internal to the broker")
    return name


def partition_log(ctx: BrokerContext, topic: str, partition: int):
    """The PartitionLog of an existing partition (UnknownTopicOrPartitionError otherwise)."""
    validate_topic_name(topic)
    return ctx.log.partition(topic, partition)


def led_partition(ctx: BrokerContext, topic: str, partition: int, *, lease: bool = True
                  ) -> tuple[PartitionRole, object]:
    """(role, PartitionLog) of a partition this broker leads; NotLeaderError otherwise.
    `lease=False`: a write, whose append waits for a lapsed lease (replica_manager.py)."""
    found = partition_log(ctx, topic, partition)
    return ctx.replicas.require_leader(topic, partition, lease=lease), found


def read_peer_request(ctx: BrokerContext, body: RequestBody, request_type, check, claimed):
    """A replication request through the peer gate (peer_gate.py): verified, fresh, bound to
    its signer and range-checked, or a counted PeerFrameError."""
    frame = body.read_all(ctx.config.network.control_body_bytes_max)
    return ctx.peer_gate.open_request(request_type.API, frame, body.session, request_type.decode,
                                      check, claimed)
