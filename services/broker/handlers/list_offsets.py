"""LIST_OFFSETS: the first offset still stored and the high watermark."""

from __future__ import annotations

from common.kaska.protocol.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from services.broker.context import BrokerContext
from services.broker.handlers.common import led_partition, read_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, ListOffsetsRequest)
    partition = led_partition(ctx, request.topic, request.partition)
    end = partition.high_watermark()
    return Reply(ListOffsetsResponse(partition.log_start_offset, end).encode())
