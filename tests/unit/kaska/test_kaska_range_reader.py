"""RangeReader over a scripted cluster: exact ranges through broken connections, waits and
deletions, with a fake clock (no broker, no real sleeping)."""

from __future__ import annotations

import pytest

from common.kaska.errors import (
    AuthenticationError,
    ConnectionLostError,
    OffsetOutOfRangeError,
)
from common.kaska.protocol import FetchRequest, FetchResponse, ListOffsetsResponse
from common.kaska.range_reader import OffsetRangeUnavailableError, RangeReader
from common.kaska.record_batch import encode_batch, stamp

PRODUCER = bytes(range(16))


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


class ScriptedCluster:
    """A partition of `batches` (records per batch given); fetches return up to
    `batches_per_fetch` whole batches starting with the one holding the offset asked for.
    `failures` lists exceptions raised by the next fetches, in order (None = answer)."""

    request_timeout_s = 1.0

    def __init__(self, records_per_batch: list[int], clock: FakeClock, *,
                 batches_per_fetch: int = 2, high_watermark: int | None = None,
                 log_start: int = 0) -> None:
        self.clock = clock
        self.batches: list[tuple[int, bytes]] = []
        offset = 0
        for sequence, count in enumerate(records_per_batch):
            values = [f"r{offset + i}".encode() for i in range(count)]
            batch = bytearray(encode_batch(values, producer_id=PRODUCER, sequence=sequence))
            stamp(batch, offset, 0)
            self.batches.append((offset, bytes(batch)))
            offset += count
        self.log_end = offset
        self.high_watermark = offset if high_watermark is None else high_watermark
        self.log_start = log_start
        self.batches_per_fetch = batches_per_fetch
        self.failures: list[Exception | None] = []
        self.fetched_from: list[int] = []

    def call(self, request, *, route=None, timeout_s=None, **_):
        if not isinstance(request, FetchRequest):
            return ListOffsetsResponse(self.log_start, self.high_watermark)
        if self.failures:
            failure = self.failures.pop(0)
            if failure is not None:
                self.clock.sleep(0.5)
                raise failure
        self.fetched_from.append(request.offset)
        chosen = [batch for base, batch in self.batches
                  if base + _count(batch) > request.offset and base + _count(batch) <=
                  self.high_watermark][:self.batches_per_fetch]
        if not chosen:
            self.clock.sleep(request.max_wait_ms / 1000)
        return FetchResponse(self.high_watermark, self.log_start, b"".join(chosen))

    def partition_count(self, topic: str) -> int:
        return 1

    def close(self) -> None:
        pass


def _count(batch: bytes) -> int:
    return int.from_bytes(batch[24:28], "big")


def reader_for(cluster: ScriptedCluster, deadline_s: float = 10.0) -> RangeReader:
    return RangeReader("unused:1", cluster=cluster, clock=cluster.clock,
                       sleep=cluster.clock.sleep, retry_deadline_s=deadline_s)


def offsets_read(reader: RangeReader, start: int, end: int) -> list[int]:
    records = list(reader.read("t", 0, start, end))
    assert [r.value for r in records] == [f"r{r.offset}".encode() for r in records]
    return [r.offset for r in records]


def test_reads_exactly_the_range_even_inside_batches():
    cluster = ScriptedCluster([3, 3, 3, 3], FakeClock())
    reader = reader_for(cluster)
    assert offsets_read(reader, 0, 12) == list(range(12))
    assert offsets_read(reader, 4, 8) == [4, 5, 6, 7]  # starts and ends mid-batch
    assert offsets_read(reader, 5, 5) == []
    assert offsets_read(reader, 11, 12) == [11]


def test_records_carry_their_batch_sequence():
    cluster = ScriptedCluster([2, 2, 2], FakeClock())
    records = list(reader_for(cluster).read("t", 0, 1, 5))
    assert [(r.offset, r.header.sequence) for r in records] == [(1, 0), (2, 1), (3, 1), (4, 2)]
    assert all(r.header.producer_id == PRODUCER for r in records)


def test_a_broken_connection_mid_range_neither_loses_nor_repeats():
    cluster = ScriptedCluster([3] * 10, FakeClock(), batches_per_fetch=1)
    cluster.failures = [None, None, ConnectionLostError("gone"), ConnectionLostError("gone"),
                        None, ConnectionLostError("gone")]
    assert offsets_read(reader_for(cluster), 1, 29) == list(range(1, 29))
    # Each fetch resumed right after the last record handed out.
    assert cluster.fetched_from == sorted(cluster.fetched_from)
    assert len(cluster.fetched_from) == len(set(cluster.fetched_from))


def test_records_already_yielded_stay_yielded_when_the_outage_outlasts_the_deadline():
    cluster = ScriptedCluster([3] * 4, FakeClock(), batches_per_fetch=1)
    cluster.failures = [None] + [ConnectionLostError("down")] * 100
    iterator = reader_for(cluster, deadline_s=5.0).read("t", 0, 0, 12)
    assert [next(iterator).offset for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ConnectionLostError):
        next(iterator)


def test_an_end_beyond_the_high_watermark_raises_after_waiting():
    clock = FakeClock()
    cluster = ScriptedCluster([3, 3], clock, high_watermark=3)
    iterator = reader_for(cluster, deadline_s=4.0).read("t", 0, 0, 6)
    assert [next(iterator).offset for _ in range(3)] == [0, 1, 2]
    with pytest.raises(OffsetRangeUnavailableError):
        next(iterator)
    assert clock.now_s >= 4.0


def test_deleted_offsets_are_an_error_not_a_short_read():
    cluster = ScriptedCluster([3, 3], FakeClock(), log_start=3)
    with pytest.raises(OffsetOutOfRangeError):
        list(reader_for(cluster).read("t", 0, 0, 6))


def test_non_retriable_errors_are_raised_at_once():
    clock = FakeClock()
    cluster = ScriptedCluster([3], clock)
    cluster.failures = [AuthenticationError("no")]
    with pytest.raises(AuthenticationError):
        list(reader_for(cluster).read("t", 0, 0, 3))
    assert clock.now_s == 0.5  # the one failed call, no retry pauses


def test_bad_ranges_are_programmer_errors():
    reader = reader_for(ScriptedCluster([1], FakeClock()))
    with pytest.raises(ValueError):
        list(reader.read("t", 0, 3, 2))
