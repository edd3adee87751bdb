"""Idempotent writes of one query's results to `results.<client id>`.

Every piece is deterministic, so a job re-run after a crash writes the very same batches and
the broker drops the ones it already has:
- producer id: uuid5(RESULTS_NAMESPACE, "<client id>/<query>"): one producer per session and
  query, the same in every run and every service process;
- row order: the caller's, which must be the same in every run (session_job sorts each query
  by all its output columns in Spark: rows equal in every sort key are equal, so the
  formatted sequence is the same whatever order Spark leaves ties in);
- slices: rows [i * n, (i + 1) * n) go out as ResultRows{first_row = i * n} with sequence i;
  the QueryDone that closes the query has sequence = the number of slices.
Rows are taken from an iterable and sent a slice at a time: a writer holds one slice, never a
query's whole result.
A re-sent batch the broker remembers is answered with its first offset; one older than what it
remembers comes back as DuplicateSequenceError, which here means "already stored".

A broker whose disk is full refuses the batch with KaskaStorageError (retriable, nothing
stored). The producer retries it like any retriable error; past those retries the writer keeps
re-sending the same batch (same sequence, so never twice) with a growing pause for up to
`storage_full_wait_s_max`, instead of failing the session's job: space is freed by an
operator or by retention, which takes longer than a failover.

Thread-safety: a `QueryResultWriter` belongs to one thread (one session job).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence

from common.backoff import Backoff
from common.flights.session_records import (
    QueryDone,
    ResultRows,
    encode,
    record_bytes_max,
    results_topic,
)
from common.kaska import Producer
from common.kaska.errors import DuplicateSequenceError, KaskaStorageError
from common.kaska.retry import RetryPolicy

log = logging.getLogger(__name__)

RESULTS_NAMESPACE = uuid.UUID("6f1f5c1e-4b7a-5d0c-9a59-2d7c3f1e8b40")
RESULTS_PARTITION = 0
# Slices go out one at a time (acks=all): 5,000 rows (~0.4 MB of JSON for Q1's widest rows,
# under the consumers' 1 MiB fetch) took Q2's 115k rows at 2M input from 230 round trips to 23.
RESULT_ROWS_PER_SLICE_DEFAULT = 5000
SLICE_TEXT_BYTES_MAX = 256 * 1024
WRITE_RETRY = RetryPolicy(retries_max=10, backoff_s_initial=0.1, backoff_s_max=2.0)
STORAGE_FULL_WAIT_S_MAX_DEFAULT = 600.0
STORAGE_FULL_PAUSE_S_INITIAL = 1.0
STORAGE_FULL_PAUSE_S_MAX = 10.0
STORAGE_FULL_BACKOFF = Backoff(initial_s=STORAGE_FULL_PAUSE_S_INITIAL,
                               max_s=STORAGE_FULL_PAUSE_S_MAX)


class ResultWriteInterruptedError(Exception):
    """The service is stopping; the rest of this query is written when the job is redone."""


def result_producer_id(client_id: str, query: str) -> uuid.UUID:
    return uuid.uuid5(RESULTS_NAMESPACE, f"{client_id}/{query}")


def sorted_rows(rows: Iterable[Sequence[str]]) -> list[list[str]]:
    """Rows sorted as text tuples: a deterministic order for callers that hold them anyway."""
    return sorted((list(row) for row in rows), key=tuple)


def slices_of(rows: Iterable[Sequence[str]], rows_per_slice: int,
              slice_text_bytes_max: int = SLICE_TEXT_BYTES_MAX
              ) -> Iterator[tuple[int, list[list[str]]]]:
    """(first row number, rows) of each slice, in order: a slice ends at `rows_per_slice` rows
    or once its fields hold `slice_text_bytes_max` characters (long fields in hostile input
    must not make a record larger than a fetch). A pure function of the rows, so every run cuts
    the same slices."""
    assert rows_per_slice > 0 and slice_text_bytes_max > 0
    first, pending, text_bytes = 0, [], 0
    for row in rows:
        pending.append(list(row))
        text_bytes += sum(len(field) for field in row)
        if len(pending) == rows_per_slice or text_bytes >= slice_text_bytes_max:
            yield first, pending
            first, pending, text_bytes = first + len(pending), [], 0
    if pending:
        yield first, pending


class QueryResultWriter:
    def __init__(self, brokers: str, client_id: str, query: str, *, token: str | None = None,
                 rows_per_slice: int = RESULT_ROWS_PER_SLICE_DEFAULT,
                 slice_pause_s: float = 0.0, stop: threading.Event | None = None,
                 storage_full_wait_s_max: float = STORAGE_FULL_WAIT_S_MAX_DEFAULT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client_id = client_id
        self.query = query
        self.topic = results_topic(client_id)
        self._rows_per_slice = rows_per_slice
        self._slice_pause_s = slice_pause_s
        self._stop = stop or threading.Event()
        self._storage_full_wait_s_max = storage_full_wait_s_max
        self._clock = clock
        self._producer = Producer(brokers, result_producer_id(client_id, query), token=token,
                                  retry=WRITE_RETRY)
        # Batches the broker called older duplicates (stored by an earlier run beyond its
        # dedup window); recent ones it simply answers with their first offset, uncounted.
        self.old_duplicates = 0

    def write(self, rows: Iterable[Sequence[str]], invalid: dict[str, int]) -> int:
        """Every row, a slice at a time, then QueryDone; returns the number of rows. `rows` must
        come in the same order in every run (module doc)."""
        total, slices = self.write_slices(rows, 0, 0)
        self.write_done(total, slices, invalid)
        return total

    def write_slices(self, rows: Iterable[Sequence[str]], first_row: int,
                     first_sequence: int) -> tuple[int, int]:
        """`rows` as slices numbered on from `first_row` with sequence numbers on from
        `first_sequence` (a query written in several parts, e.g. a micro-batch at a time);
        returns the (rows, slices) written in all, these included."""
        slices, total = first_sequence, first_row
        for first, chunk in slices_of(rows, self._rows_per_slice):
            if self._stop.is_set():
                raise ResultWriteInterruptedError(f"{self.topic} {self.query}: stopped at "
                                                  f"slice {slices}")
            self._send(encode(ResultRows(self.query, first_row + first, chunk)), slices)
            slices, total = slices + 1, first_row + first + len(chunk)
            if self._slice_pause_s:
                self._stop.wait(self._slice_pause_s)
        return total, slices

    def write_done(self, rows: int, sequence: int, invalid: dict[str, int]) -> None:
        """The QueryDone closing the query: `rows` rows in `sequence` slices before it."""
        self._send(encode(QueryDone(self.query, rows, dict(invalid))), sequence)

    def _send(self, payload: bytes, sequence: int) -> None:
        assert len(payload) <= record_bytes_max, "slices are bounded by rows_per_slice"
        refused_since = None
        pauses_s = STORAGE_FULL_BACKOFF.delays_s()
        while True:
            try:
                self._producer.send_batch(self.topic, RESULTS_PARTITION, [payload],
                                          sequence=sequence)
                return
            except DuplicateSequenceError:
                self.old_duplicates += 1
                return
            except KaskaStorageError as error:
                now = self._clock()
                refused_since = now if refused_since is None else refused_since
                if now - refused_since >= self._storage_full_wait_s_max:
                    raise
                pause_s = next(pauses_s)
                log.warning("%s %s: broker storage full (%s); slice %d sent again in %.0f s",
                            self.topic, self.query, error, sequence, pause_s)
            if self._stop.wait(pause_s):
                raise ResultWriteInterruptedError(f"{self.topic} {self.query}: stopped while "
                                                  f"the broker's storage was full")

    def close(self) -> None:
        self._producer.close()

    def __enter__(self) -> QueryResultWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
