"""Exact offset-range reads: every record of [start, end) of one partition, once, in order.

What the Spark `kaska` source needs and the polling `Consumer` does not give: a bounded range
read that survives a broker restart or a leader change in its middle without losing or
repeating a record, and says so loudly when it cannot.

- Records are yielded with their batch header (producer id = client id, sequence = message id).
- The position only moves past records already yielded, so a fetch retried after a broken
  connection continues exactly where the last one stopped (a batch that straddles the position
  is re-fetched and its earlier records skipped).
- Retriable errors (connection lost, broker unavailable, not leader, timeouts) are retried
  with backoff until `retry_deadline_s` has passed since the last progress; then the error is
  raised and the caller (a Spark task) fails as a whole. Non-retriable ones (offset out of
  range: the data was deleted by retention) are raised at once.
- A range ending beyond the high watermark waits for the data up to `retry_deadline_s`, then
  raises `OffsetRangeUnavailableError`: a short read is never passed off as a whole one.

Not thread-safe: one `RangeReader` (one connection per broker) per thread or Spark task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from common.backoff import Backoff
from common.kaska.cluster import Cluster
from common.kaska.errors import KaskaError, OffsetOutOfRangeError
from common.kaska.protocol import FetchRequest, ListOffsetsRequest
from common.kaska.record_batch import BatchHeader, iter_batches, iter_records
from common.kaska.retry import RetryPolicy

log = logging.getLogger(__name__)

FETCH_BYTES_MAX_DEFAULT = 8 * 1024 * 1024
FETCH_WAIT_MS_DEFAULT = 500  # long-poll while a range's end is not yet visible
RETRY_DEADLINE_S_DEFAULT = 60.0
RETRY_PAUSE_S_MAX = 2.0
RETRY_BACKOFF = Backoff(initial_s=0.1, max_s=RETRY_PAUSE_S_MAX)


class OffsetRangeUnavailableError(KaskaError):
    """The partition's high watermark stayed below the end of the range asked for."""


@dataclass(frozen=True, slots=True)
class RangeRecord:
    offset: int
    value: bytes
    header: BatchHeader  # producer id, sequence (the message id), timestamp of its batch


class RangeReader:
    def __init__(self, brokers: str | Sequence[str], *, token: str | None = None,
                 fetch_bytes_max: int = FETCH_BYTES_MAX_DEFAULT,
                 fetch_wait_ms: int = FETCH_WAIT_MS_DEFAULT,
                 retry_deadline_s: float = RETRY_DEADLINE_S_DEFAULT,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 5.0,
                 cluster: Cluster | None = None, clock=time.monotonic,
                 sleep=time.sleep) -> None:
        """`cluster`, `clock` and `sleep` are for tests (a scripted cluster, no real waits)."""
        assert fetch_bytes_max > 0 and fetch_wait_ms >= 0 and retry_deadline_s >= 0
        # The cluster's own retries are short; the deadline loop here rides out longer outages.
        self._cluster = cluster or Cluster(
            brokers, token=token, request_timeout_s=request_timeout_s,
            connect_timeout_s=connect_timeout_s,
            retry=RetryPolicy(retries_max=2, backoff_s_initial=0.05, backoff_s_max=0.5))
        self._clock = clock
        self._sleep = sleep
        self._fetch_bytes_max = fetch_bytes_max
        self._fetch_wait_ms = fetch_wait_ms
        self._retry_deadline_s = retry_deadline_s

    # -- offsets -----------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        return self._with_retries(lambda: self._cluster.partition_count(topic),
                                  f"partitions of {topic}")

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of one partition."""
        request = ListOffsetsRequest(topic, partition)
        response = self._with_retries(
            lambda: self._cluster.call(request, route=(topic, partition)),
            f"offsets of {topic}/{partition}")
        return response.log_start_offset, response.log_end_offset

    def end_offsets(self, topic: str) -> list[int]:
        """The high watermark of every partition of `topic`."""
        return [self.offsets(topic, p)[1] for p in range(self.partition_count(topic))]

    def start_offsets(self, topic: str) -> list[int]:
        return [self.offsets(topic, p)[0] for p in range(self.partition_count(topic))]

    # -- records -----------------------------------------------------------------------------

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[RangeRecord]:
        """Every record with start <= offset < end, in offset order, each exactly once."""
        if not 0 <= start <= end:
            raise ValueError(f"bad offset range [{start}, {end})")
        position = start
        while position < end:
            for record in self._fetch(topic, partition, position, end):
                yield record
                position = record.offset + 1

    def _fetch(self, topic: str, partition: int, position: int, end: int) -> list[RangeRecord]:
        """The records of one fetch answer in [position, end); waits while none is visible."""
        request = FetchRequest(topic, partition, position, self._fetch_bytes_max,
                               self._fetch_wait_ms)
        waiting_since = self._clock()
        while True:
            response = self._with_retries(
                lambda: self._cluster.call(request, route=(topic, partition),
                                           server_wait_s=self._fetch_wait_ms / 1000),
                f"fetch {topic}/{partition}@{position}")
            if response.log_start_offset > position:
                raise OffsetOutOfRangeError(
                    f"{topic}/{partition}: offset {position} was deleted (log starts at "
                    f"{response.log_start_offset})")
            records = _records_in(response.records, position, end)
            if records:
                return records
            if self._clock() - waiting_since > self._retry_deadline_s:
                raise OffsetRangeUnavailableError(
                    f"{topic}/{partition}: offsets [{position}, {end}) not available "
                    f"(high watermark {response.high_watermark}) after "
                    f"{self._retry_deadline_s:.0f} s")

    def _with_retries(self, call, what: str):
        """`call()`, retried on retriable errors until the deadline passes without success."""
        started = self._clock()
        attempt = 0
        while True:
            try:
                return call()
            except KaskaError as error:
                waited_s = self._clock() - started
                if not error.retriable or waited_s >= self._retry_deadline_s:
                    raise
                pause_s = min(RETRY_BACKOFF.delay_s(attempt), self._retry_deadline_s - waited_s)
                log.warning("%s failed (%s: %s); retrying in %.2f s", what,
                            type(error).__name__, error, pause_s)
                self._sleep(pause_s)
                attempt += 1

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _records_in(buf, position: int, end: int) -> list[RangeRecord]:
    """The records of the whole batches in `buf` with position <= offset < end."""
    records = []
    for header, batch in iter_batches(buf):
        if header.next_offset <= position:
            continue
        if header.base_offset >= end:
            break
        for offset, value in iter_records(batch, header):
            if position <= offset < end:
                records.append(RangeRecord(offset, value, header))
    return records
