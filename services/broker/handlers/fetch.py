"""FETCH: whole batches below the high watermark, sent from the segment files with sendfile.

When the consumer is caught up (offset == high watermark) and asks to wait, the request
long-polls on the partition's condition variable, at most `fetch_wait_ms_max`. It waits on the
broker's DataNotifier rather than the storage's `wait_for_append`: what a consumer may see is
the high watermark (the replica manager's call), not the log end, and a stopping broker must
wake every waiter at once.
"""

from __future__ import annotations

from common.kaska.errors import OffsetNotAvailableError, OffsetOutOfRangeError
from common.kaska.protocol.fetch import FetchRequest, encode_response_prefix
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import led_partition, read_request
from services.broker.metrics import records_in_slices
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, FetchRequest)
    _role, partition_log = led_partition(ctx, request.topic, request.partition)
    replicas = ctx.replicas

    def high_watermark() -> int:
        return replicas.high_watermark(request.topic, request.partition, partition_log)

    start = partition_log.log_start_offset
    if request.offset < start or request.offset > partition_log.log_end_offset:
        raise OffsetOutOfRangeError(f"offset {request.offset} outside [{start}, "
                                    f"{high_watermark()}] of {request.topic}/{request.partition}")
    if request.offset > high_watermark():
        # In this leader's log but not yet known committed (right after a failover).
        raise OffsetNotAvailableError(f"offset {request.offset} above the high watermark "
                                      f"{high_watermark()} of {request.topic}/"
                                      f"{request.partition}; retry")
    wait_ms = min(request.max_wait_ms, ctx.config.network.fetch_wait_ms_max)
    if request.offset == high_watermark() and wait_ms > 0:
        ctx.notifier.wait_until(request.topic, request.partition,
                                lambda: high_watermark() > request.offset, wait_ms / 1000)
        # Still leading with a lease after the wait (a pause may have cost it meanwhile)?
        replicas.require_leader(request.topic, request.partition)
    visible_end = high_watermark()
    max_bytes = min(request.max_bytes, ctx.config.network.frame_bytes_max)
    slices = partition_log.read(request.offset, max_bytes, upto_offset=visible_end)
    prefix = encode_response_prefix(visible_end, partition_log.log_start_offset)
    return Reply(prefix, slices, records=records_in_slices(slices))
