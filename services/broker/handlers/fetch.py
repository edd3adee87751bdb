"""FETCH: whole batches below the high watermark, sent from the segment files with sendfile.

The partition's `fetch` (cluster/partition.py) checks the offset and reads; an offset between
the high watermark and the log end (in this leader's log, not yet known committed: right after
a failover) answers OFFSET_NOT_AVAILABLE, retriable. When the consumer is caught up (offset ==
high watermark) and asks to wait, the request long-polls (`await_high_watermarks`, shared with
the Kafka listener's fetch), at most `fetch_wait_ms_max`, then reads again.
"""

from __future__ import annotations

from common.kaska.errors import OffsetNotAvailableError
from common.kaska.protocol.fetch import FetchRequest, encode_response_prefix
from services.broker.context import BrokerContext
from services.broker.handlers.common import await_high_watermarks, led_partition, read_request
from services.broker.metrics import records_in_slices
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, FetchRequest)
    partition = led_partition(ctx, request.topic, request.partition)
    # At least 1: storage then returns one whole batch whatever the limit (as Kafka's KIP-74).
    max_bytes = max(1, min(request.max_bytes, ctx.config.network.frame_bytes_max))
    fetched = partition.fetch(request.offset, max_bytes)
    if fetched.above_high_watermark:
        raise OffsetNotAvailableError(f"offset {request.offset} above the high watermark "
                                      f"{fetched.high_watermark} of {partition.topic}/"
                                      f"{partition.number}; retry")
    wait_ms = min(request.max_wait_ms, ctx.config.network.fetch_wait_ms_max)
    if fetched.caught_up and wait_ms > 0:
        await_high_watermarks(ctx, [(request.topic, request.partition, request.offset)],
                              wait_ms / 1000)
        # Still leading with a lease after the wait (a pause may have cost it meanwhile)?
        partition.require_leader()
        fetched = partition.fetch(request.offset, max_bytes)
    prefix = encode_response_prefix(fetched.high_watermark, fetched.log_start_offset)
    return Reply(prefix, fetched.slices, records=records_in_slices(fetched.slices))
