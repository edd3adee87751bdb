"""PRODUCE: the batch goes from the socket straight into the log's mapped region.

Only the small prefix (topic, partition, acks) is read into memory; then the replica manager
has `PartitionLog.append_from` reserve the batch's bytes in the active segment and call back to
fill them with `recv_into` (zero copy). The storage checks CRC and producer sequence before the
batch becomes visible; a retried batch is answered with its original offset (duplicate). The
answer waits until a majority of brokers hold the batch (acks=all) or the leader has it
(acks=1); consumers are woken when the high watermark passes it, not here.
"""

from __future__ import annotations

from common.kaska.errors import CorruptBatchError
from common.kaska.protocol.produce import ProduceResponse, read_prefix
from common.kaska.record_batch import HEADER_BYTES
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic, led_partition
from services.broker.reply import DeferredReply, Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    prefix = read_prefix(body.read_exact)
    client_writable_topic(prefix.topic)
    _role, partition_log = led_partition(ctx, prefix.topic, prefix.partition)
    batch_bytes = body.remaining
    if batch_bytes < HEADER_BYTES:
        raise CorruptBatchError(f"a batch of {batch_bytes} bytes cannot hold its header")

    def fill(region: memoryview) -> None:
        body.rearm()  # the wait for the partition lock is not this client's delay
        body.recv_into_exactly(region)

    result, await_acks = ctx.replicas.append_deferred(prefix.topic, prefix.partition,
                                                      partition_log, batch_bytes, fill,
                                                      prefix.acks)
    answer = Reply(ProduceResponse(result.base_offset, result.record_count,
                                   result.duplicate).encode())

    def when_acked() -> Reply:
        await_acks()
        return answer

    return DeferredReply(when_acked)
