"""PRODUCE: the batch goes from the socket straight into the log's mapped region.

Only the small prefix (topic, partition, acks) is read into memory; then
`PartitionLog.append_from` reserves the batch's bytes in the active segment and calls back to
fill them with `recv_into` (zero copy). The storage checks CRC and producer sequence before the
batch becomes visible; a retried batch is answered with its original offset (duplicate).
"""

from __future__ import annotations

from common.kaska.errors import CorruptBatchError
from common.kaska.protocol.produce import ProduceResponse, read_prefix
from common.kaska.record_batch import HEADER_BYTES
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic, led_partition
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    prefix = read_prefix(body.read_exact)
    client_writable_topic(prefix.topic)
    role, partition_log = led_partition(ctx, prefix.topic, prefix.partition)
    batch_bytes = body.remaining
    if batch_bytes < HEADER_BYTES:
        raise CorruptBatchError(f"a batch of {batch_bytes} bytes cannot hold its header")

    def fill(region: memoryview) -> None:
        body.rearm()  # the wait for the partition lock is not this client's delay
        body.recv_into_exactly(region)

    result = partition_log.append_from(batch_bytes, fill, leader_epoch=role.leader_epoch)
    end_offset = result.base_offset + result.record_count
    ctx.replicas.await_acks(prefix.topic, prefix.partition, end_offset, prefix.acks,
                            ctx.config.read_timeout_s)
    if not result.duplicate:
        ctx.notifier.notify(prefix.topic, prefix.partition)
    return Reply(ProduceResponse(result.base_offset, result.record_count,
                                 result.duplicate).encode())
