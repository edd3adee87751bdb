"""Small steps every handler shares, of both listeners (Kaska's here, Kafka's in kafka/): read
the body, check the topic, find the partition, wait for data to fetch."""

from __future__ import annotations

import time
from collections.abc import Sequence

from common.kaska.errors import InvalidTopicError, KaskaError
from common.kaska.topic_name import is_internal, validate_topic_name
from services.broker.cluster.partition import Partition
from services.broker.context import BrokerContext
from services.broker.network.body import RequestBody

# Waiting on several partitions, the long poll turns over them in slices this long (a write
# to any of them is seen within one turn).
MULTI_WAIT_SLICE_S = 0.05


def read_request(ctx: BrokerContext, body: RequestBody, request_type):
    """Decode a whole (small) body; InvalidRequestError when it does not parse."""
    return request_type.decode(body.read_all(ctx.config.network.control_body_bytes_max))


def client_writable_topic(name: str) -> str:
    """A topic a client may create, delete or produce to: legal and not internal."""
    validate_topic_name(name)
    if is_internal(name):
        raise InvalidTopicError(f"topic {name!r} is internal to the broker")
    return name


def find_partition(ctx: BrokerContext, topic: str, partition: int) -> Partition:
    """An existing partition (UnknownTopicOrPartitionError otherwise)."""
    validate_topic_name(topic)
    return ctx.partitions.get(topic, partition)


def led_partition(ctx: BrokerContext, topic: str, partition: int, *, lease: bool = True
                  ) -> Partition:
    """A partition this broker leads; NotLeaderError otherwise. `lease=False`: a write, whose
    append waits for a lapsed lease (cluster/replica_manager.py)."""
    found = find_partition(ctx, topic, partition)
    found.require_leader(lease=lease)
    return found


def await_high_watermarks(ctx: BrokerContext, positions: Sequence[tuple[str, int, int]],
                          timeout_s: float) -> bool:
    """The long poll of a caught-up fetch: wait until the high watermark of one of the
    (topic, partition, offset) `positions` passes its offset, the partition is gone, the broker
    stops or `timeout_s` passes (True: one is ready). It waits on the partitions' conditions
    (network/notifier.py), not on the storage's appends: what a consumer may see is the high
    watermark, and a stopping broker wakes every waiter at once."""
    deadline = time.monotonic() + timeout_s
    slice_s = timeout_s if len(positions) == 1 else MULTI_WAIT_SLICE_S
    while not ctx.notifier.stopping and (left_s := deadline - time.monotonic()) > 0:
        for topic, partition, offset in positions:
            def ready(topic: str = topic, partition: int = partition, offset: int = offset
                      ) -> bool:
                try:
                    return ctx.partitions.get(topic, partition).high_watermark() > offset
                except KaskaError:
                    return True  # gone: answer now, with its error
            if ctx.notifier.wait_until(topic, partition, ready, min(slice_s, left_s)):
                return True
    return False


def read_peer_request(ctx: BrokerContext, body: RequestBody, request_type, check, claimed):
    """A replication request through the peer gate (network/peer_gate.py): verified, fresh,
    bound to its signer and range-checked, or a counted PeerFrameError."""
    frame = body.read_all(ctx.config.network.control_body_bytes_max)
    return ctx.peer_gate.open_request(request_type.API, frame, body.session, request_type.decode,
                                      check, claimed)
