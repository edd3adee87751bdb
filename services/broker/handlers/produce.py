"""PRODUCE: the batch goes from the socket into the connection's buffer, then into the log.

The small prefix (topic, partition, acks) is read first; then the whole batch lands in the
connection's reusable buffer (no allocation), off every lock, so a producer that stalls halfway
through its batch stalls only itself; only then does the partition (cluster/partition.py) have
`PartitionLog.append_from` reserve the batch's bytes in the active segment under the partition's
append lock and call back to copy them in (one memcpy). The storage checks CRC and producer
sequence before the batch becomes visible; a retried batch is answered with its original
offset (duplicate). The answer waits until a majority of brokers hold the batch (acks=all) or
the leader has it (acks=1); consumers are woken when the high watermark passes it, not here.

A broker that does not lead the partition refuses before the batch is read; one that leads but
whose lease lapsed (its followers' confirmations are late on a loaded machine) holds the batch
until the lease is back, at most `lease_wait_s`, rather than refusing it (backpressure: the
producer's requests wait; cluster/replica_manager.py).
"""

from __future__ import annotations

from common.kaska.errors import CorruptBatchError
from common.kaska.protocol.produce import ProduceResponse, read_prefix
from common.kaska.record_batch import HEADER_BYTES
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic, led_partition
from services.broker.network.body import RequestBody
from services.broker.network.reply import DeferredReply, Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    prefix = read_prefix(body.read_exact)
    client_writable_topic(prefix.topic)
    partition = led_partition(ctx, prefix.topic, prefix.partition, lease=False)
    batch_bytes = body.remaining
    if batch_bytes < HEADER_BYTES:
        raise CorruptBatchError(f"a batch of {batch_bytes} bytes cannot hold its header")

    batch = body.receive_rest()

    def fill(region: memoryview) -> None:
        region[:] = batch

    result, await_acks = partition.append_deferred(batch_bytes, fill, prefix.acks)
    answer = Reply(ProduceResponse(result.base_offset, result.record_count,
                                   result.duplicate).encode())

    def when_acked() -> Reply:
        await_acks()
        return answer

    return DeferredReply(when_acked)
