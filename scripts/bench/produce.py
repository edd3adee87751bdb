"""Producing in the benchmarks: pre-encoded idempotent record batches (`build_batches`, so that
encoding, the producer's cost, stays out of the timed rounds) sent over one connection with up
to `in_flight` requests unanswered (`produce`), as a Kafka producer pipelines them.

Invariants: a connection's requests are served one after the other, so the batches land in
order; every answer is checked (an error raises, a duplicate is a programmer error).
Threads: none; the caller's (the connection's own reader thread answers the futures).
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future

from common.kaska.connection import BrokerConnection, error_from_answer
from common.kaska.protocol import Api, ProduceRequest, ProduceResponse
from common.kaska.protocol.produce import ACKS_ALL
from common.kaska.record_batch import HEADER_BYTES, RECORD_LENGTH_BYTES, encode_batch

PRODUCER_ID = bytes(range(16))
BROKER_TIMEOUT_S = 120.0


def build_batches(records: int, record_bytes: int, batch_bytes: int,
                  producer_id: bytes = PRODUCER_ID) -> list[bytes]:
    """Idempotent batches of about batch_bytes, holding `records` records of record_bytes."""
    per_batch = max(1, (batch_bytes - HEADER_BYTES) // (record_bytes + RECORD_LENGTH_BYTES))
    pool = os.urandom(record_bytes + 251)
    values = [pool[i % 251:i % 251 + record_bytes] for i in range(per_batch)]
    batches = []
    for sequence, start in enumerate(range(0, records, per_batch)):
        count = min(per_batch, records - start)
        batches.append(encode_batch(values[:count], producer_id=producer_id, sequence=sequence))
    return batches


def produce(connection: BrokerConnection, topic: str, batches: list[bytes],
            in_flight: int, acks: int = ACKS_ALL, partition: int = 0) -> None:
    """Send the batches in order, at most `in_flight` unanswered at a time on the connection
    (the broker serves a connection's requests one after the other, so order holds)."""
    pending: deque[Future] = deque()
    for batch in batches:
        if len(pending) == in_flight:
            check_produced(pending.popleft())
        pending.append(connection.send(Api.PRODUCE, list(
            ProduceRequest(topic, partition, acks, batch).encode_parts())))
    while pending:
        check_produced(pending.popleft())


def check_produced(answer: Future) -> None:
    code, body = answer.result(BROKER_TIMEOUT_S)
    if code:
        raise error_from_answer(code, body)
    assert not ProduceResponse.decode(body).duplicate
