"""LIST_OFFSETS: the first offset still stored and the high watermark."""

from __future__ import annotations

from common.kaska.protocol.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import led_partition, read_request
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, ListOffsetsRequest)
    _role, partition_log = led_partition(ctx, request.topic, request.partition)
    end = ctx.replicas.high_watermark(request.topic, request.partition, partition_log)
    return Reply(ListOffsetsResponse(partition_log.log_start_offset, end).encode())
