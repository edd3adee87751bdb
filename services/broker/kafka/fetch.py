"""Fetch (api key 1, v4..12): whole batches below the high watermark, transcoded to RecordBatch
v2 (records.py). No transactions, so the last stable offset is the high watermark and there are
no aborted transactions; isolation levels read alike.

Each partition is read by its `fetch` (cluster/partition.py), as a Kaska FETCH reads it:
fetch_offset outside [log start, log end] is OFFSET_OUT_OF_RANGE; between the high watermark
and the log end (a new leader whose commit has not caught up) the answer is empty, as Kafka's.
The first batch may start before fetch_offset (clients skip the records below it). A
partition's current leader epoch (v9+) is checked first (fencing.py: FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH).

Long poll: while fewer than min_bytes are ready, the request waits at most
min(max_wait_ms, fetch_wait_ms_max) for a high watermark to pass a fetch offset
(`await_high_watermarks`, the Kaska FETCH's long poll too).

Fetch sessions (KIP-227) are not kept: every answer says session 0 ("none"), so clients send
full requests; an incremental one (session epoch > 0) answers FETCH_SESSION_ID_NOT_FOUND.

Records are never null, even with an error: Kafka's brokers send an empty set, and older
librdkafka (2.0, Debian's kcat) rejects a null one as a protocol error.

Bytes: at most partition_max_bytes per partition and max_bytes in all, except that the first
partition with data always gets one whole batch (KIP-74), so a consumer always progresses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kafka.protocol.consumer import FetchResponse

from common.kaska.errors import KaskaError
from common.kaska.record_batch import LENGTH_FIELD_END, parse_header, peek_total_bytes
from services.broker.handlers.common import await_high_watermarks
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import FETCH_SESSION_ID_NOT_FOUND, NONE, kafka_code
from services.broker.kafka.fencing import NO_EPOCH, led_partition_at
from services.broker.kafka.records import kaska_to_kafka_parts

NO_SESSION = 0
FULL_FETCH_EPOCHS = (-1, 0)

TopicAnswer = FetchResponse.FetchableTopicResponse
PartitionAnswer = TopicAnswer.PartitionData


@dataclass(frozen=True, slots=True)
class Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = NO_EPOCH


def handle(kctx: KafkaContext, request) -> FetchResponse:
    if request.version >= 7 and request.session_epoch not in FULL_FETCH_EPOCHS:
        return FetchResponse(throttle_time_ms=0, error_code=FETCH_SESSION_ID_NOT_FOUND,
                             session_id=NO_SESSION, responses=[])
    wanted = [Wanted(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                     p.current_leader_epoch)
              for topic in request.topics for p in topic.partitions]
    config = kctx.broker.config
    wait_s = max(0, min(request.max_wait_ms, config.network.fetch_wait_ms_max)) / 1000
    deadline = time.monotonic() + wait_s
    positions = [(item.topic, item.partition, item.offset) for item in wanted]
    while True:
        answers = _read_all(kctx, wanted, request.max_bytes)
        ready_bytes = sum(len(a.records or b"") for a in answers)
        failed = any(a.error_code != NONE for a in answers)
        left_s = deadline - time.monotonic()
        if ready_bytes >= max(request.min_bytes, 1) or failed or left_s <= 0 or not wanted:
            break
        if not await_high_watermarks(kctx.broker, positions, left_s):
            break  # nothing new before the deadline (or the broker stops)
    return FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=NO_SESSION,
                         responses=_by_topic(wanted, answers))


def _read_all(kctx: KafkaContext, wanted: list[Wanted], max_bytes: int) -> list:
    budget = max_bytes if max_bytes > 0 else kctx.broker.config.network.frame_bytes_max
    budget = min(budget, kctx.broker.config.network.frame_bytes_max)
    answers = []
    for item in wanted:
        limit = min(item.max_bytes, budget)
        if not any(answer.records for answer in answers):
            limit = max(limit, 1)  # storage then returns at least one whole batch
        answer = _read_partition(kctx, item, limit)
        budget -= len(answer.records or b"")
        answers.append(answer)
    return answers


def _read_partition(kctx: KafkaContext, item: Wanted, limit: int):
    answer = PartitionAnswer(partition_index=item.partition, error_code=NONE, high_watermark=-1,
                             last_stable_offset=-1, log_start_offset=-1,
                             aborted_transactions=None, preferred_read_replica=-1, records=b"")
    try:
        partition, _ = led_partition_at(kctx, item.topic, item.partition,
                                        item.current_leader_epoch)
        # Named in an OFFSET_OUT_OF_RANGE answer too: where the client may start again.
        answer.log_start_offset = partition.log_start_offset
        answer.high_watermark = answer.last_stable_offset = partition.high_watermark()
        fetched = partition.fetch(item.offset, limit)
        answer.high_watermark = answer.last_stable_offset = fetched.high_watermark
        answer.log_start_offset = fetched.log_start_offset
        answer.records = _transcode(fetched.copy())
    except KaskaError as error:
        answer.error_code = kafka_code(error)
        answer.records = b""
    return answer


def _transcode(stored: bytes) -> bytes:
    """Every whole stored batch as a Kafka batch (storage validated their CRCs on append)."""
    out = []
    pos = 0
    while len(stored) - pos >= LENGTH_FIELD_END:
        total = peek_total_bytes(memoryview(stored)[pos:])
        if pos + total > len(stored):
            break
        batch = memoryview(stored)[pos:pos + total]
        out.extend(kaska_to_kafka_parts(batch, parse_header(batch)))
        pos += total
    return b"".join(out)


def _by_topic(wanted: list[Wanted], answers: list) -> list:
    topics: dict[str, list] = {}
    for item, answer in zip(wanted, answers, strict=True):
        topics.setdefault(item.topic, []).append(answer)
    return [TopicAnswer(topic=name, partitions=parts) for name, parts in topics.items()]
