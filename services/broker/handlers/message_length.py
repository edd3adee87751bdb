"""MESSAGE_LENGTH: the length of one record, found by walking the record lengths of the batch
that holds it (the only place the broker looks inside a batch, and it copies nothing). A record
produced through Kafka's protocol is a Kafka record body (common/kaska/kafka_record.py): its
length is its value's, as a Kaska consumer reads it; if its producer compressed the batch, the
batch is inflated (bounded by the log's batch_bytes_max, as it was when it was produced) to
find it: the one place the broker inflates a stored batch, for one request."""

from __future__ import annotations

import struct

from common.kaska.errors import CorruptBatchError, OffsetNotAvailableError, OffsetOutOfRangeError
from common.kaska.kafka_compression import CODEC_NONE, codec_of, compressed_values
from common.kaska.kafka_record import ATTR_KAFKA_RECORDS, record_value
from common.kaska.protocol.message_length import MessageLengthRequest, MessageLengthResponse
from common.kaska.record_batch import HEADER_BYTES, RECORD_LENGTH_BYTES, parse_header
from services.broker.context import BrokerContext
from services.broker.handlers.common import led_partition, read_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply

_RECORD_LEN = struct.Struct(">I")


def record_length_at(batch: bytes, offset: int, inflated_bytes_max: int) -> int:
    """Length of the record at `offset` inside one stamped batch."""
    header = parse_header(batch)
    if not header.base_offset <= offset < header.next_offset:
        raise OffsetOutOfRangeError(f"offset {offset} is not in the batch at "
                                    f"{header.base_offset}")
    codec = codec_of(header.attributes)
    if codec != CODEC_NONE:
        payload = memoryview(batch)[HEADER_BYTES:header.total_bytes]
        values = compressed_values(payload, codec, header.record_count, inflated_bytes_max)
        return len(values[offset - header.base_offset])
    end = min(header.total_bytes, len(batch))
    pos = HEADER_BYTES
    for _ in range(offset - header.base_offset + 1):
        if pos + RECORD_LENGTH_BYTES > end:
            raise CorruptBatchError("record length runs past the batch")
        (length,) = _RECORD_LEN.unpack_from(batch, pos)
        pos += RECORD_LENGTH_BYTES + length
    if pos > end:
        raise CorruptBatchError("record runs past the batch")
    if header.attributes & ATTR_KAFKA_RECORDS:
        return len(record_value(memoryview(batch)[pos - length:pos]))
    return length


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, MessageLengthRequest)
    partition = led_partition(ctx, request.topic, request.partition)
    partition_log = partition.log
    end = partition.high_watermark()
    if end <= request.offset < partition_log.log_end_offset:
        raise OffsetNotAvailableError(f"offset {request.offset} above the high watermark {end}")
    if not partition_log.log_start_offset <= request.offset < end:
        raise OffsetOutOfRangeError(f"offset {request.offset} outside "
                                    f"[{partition_log.log_start_offset}, {end}) of "
                                    f"{request.topic}/{request.partition}")
    # max_bytes 1: storage returns exactly the one whole batch holding the offset.
    batch = partition_log.read_bytes(request.offset, 1, upto_offset=end)
    length = record_length_at(batch, request.offset, partition_log.config.batch_bytes_max)
    return Reply(MessageLengthResponse(length).encode())
