"""Receiving a session's results: follow `results.<cid>` until Q1-Q4 are complete, once each.

The query service writes, per query, ResultRows slices (rows numbered from 0 by `first_row`)
and then one QueryDone{rows} (common/session_records.py). A re-run of the service may write a
slice or a QueryDone again; `ResultTable` keeps the first copy of each (query, row number) and
counts the others as duplicates (the topic is this client's alone, so the client id is implicit
in the key). A query is complete when its QueryDone arrived and rows 0 .. rows-1 all did; a row
number at or beyond QueryDone.rows raises `InconsistentResultsError`.

`ResultsFollower` reads the topic from offset 0 (so a restarted client rebuilds the same table),
hands new rows to a callback (the console printer), and returns when all four queries are
complete; it raises `ResultsTimeoutError` after `results_timeout_s` and `ResultsInterruptedError`
when the stop event is set. Undecodable records are counted and logged, never fatal. Consumer
errors ride out broker restarts (`client.patience`).

Thread-safety: both classes are used by one thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from client.patience import STALL_TIMEOUT_S_DEFAULT, persist
from common.kaska import Consumer
from common.session_records import (
    QUERIES,
    MalformedSessionRecordError,
    QueryDone,
    ResultRows,
    decode,
    results_topic,
)

log = logging.getLogger(__name__)

RESULTS_TIMEOUT_S_DEFAULT = 3600.0
POLL_TIMEOUT_S = 0.5
RESULTS_PARTITION = 0


class ResultsError(Exception):
    """Base of the result-collection errors."""


class InconsistentResultsError(ResultsError):
    """A row number outside what the query's QueryDone announced."""


class ResultsTimeoutError(ResultsError):
    """The results were not complete within `results_timeout_s`."""


class ResultsInterruptedError(ResultsError):
    """The stop event was set before the results were complete."""


NewRowsCallback = Callable[[str, list[list[str]]], None]  # (query, rows not seen before)


@dataclass
class ResultTable:
    """Every query's rows by row number, deduplicated (rules: module doc)."""

    rows: dict[str, dict[int, list[str]]] = field(
        default_factory=lambda: {query: {} for query in QUERIES})
    done: dict[str, QueryDone] = field(default_factory=dict)
    duplicate_rows: int = 0
    duplicate_done: int = 0

    def add_rows(self, record: ResultRows) -> list[list[str]]:
        """Store the record's rows; the ones not seen before, in order."""
        table = self.rows[record.query]
        fresh = []
        for number, row in enumerate(record.rows, start=record.first_row):
            if number in table:
                self.duplicate_rows += 1
                continue
            self._check_number(record.query, number)
            table[number] = row
            fresh.append(row)
        return fresh

    def add_done(self, record: QueryDone) -> bool:
        """Store the QueryDone; False for a repeat."""
        if record.query in self.done:
            self.duplicate_done += 1
            if record.rows != self.done[record.query].rows:
                log.warning("%s: a repeated QueryDone says %d rows, the first said %d",
                            record.query, record.rows, self.done[record.query].rows)
            return False
        self.done[record.query] = record
        for number in self.rows[record.query]:
            self._check_number(record.query, number)
        return True

    def _check_number(self, query: str, number: int) -> None:
        done = self.done.get(query)
        if number < 0 or (done is not None and number >= done.rows):
            raise InconsistentResultsError(
                f"{query} row {number} outside the announced {done.rows if done else '?'} rows")

    def is_complete(self, query: str) -> bool:
        done = self.done.get(query)
        return done is not None and len(self.rows[query]) == done.rows

    def complete(self) -> bool:
        return all(self.is_complete(query) for query in QUERIES)

    def ordered_rows(self, query: str) -> list[list[str]]:
        table = self.rows[query]
        return [table[number] for number in sorted(table)]


@dataclass
class FollowStats:
    records: int = 0
    malformed_records: int = 0
    first_record_at: float | None = None  # monotonic
    complete_at: float | None = None  # monotonic


class ResultsFollower:
    def __init__(self, consumer: Consumer, client_id: str, stop: threading.Event,
                 on_rows: NewRowsCallback, on_done: Callable[[QueryDone], None],
                 results_timeout_s: float = RESULTS_TIMEOUT_S_DEFAULT,
                 stall_timeout_s: float = STALL_TIMEOUT_S_DEFAULT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.consumer = consumer
        self.topic = results_topic(client_id)
        self.stop = stop
        self.on_rows = on_rows
        self.on_done = on_done
        self.results_timeout_s = results_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        self.table = ResultTable()
        self.stats = FollowStats()

    def follow(self) -> ResultTable:
        """Read until every query is complete (or raise, see module doc)."""
        self.consumer.seek(self.topic, 0, RESULTS_PARTITION)
        deadline = self.clock() + self.results_timeout_s
        while not self.table.complete():
            if self.stop.is_set():
                raise ResultsInterruptedError("stopped while waiting for results")
            if self.clock() > deadline:
                raise ResultsTimeoutError(self._timeout_message())
            message = persist(lambda: self.consumer.poll(POLL_TIMEOUT_S),
                              f"read {self.topic}", self.stop, self.stall_timeout_s)
            if message is not None:
                self._absorb(message.value, message.offset)
        self.stats.complete_at = self.clock()
        return self.table

    def _absorb(self, payload: bytes, offset: int) -> None:
        self.stats.records += 1
        if self.stats.first_record_at is None:
            self.stats.first_record_at = self.clock()
        try:
            record = decode(payload)
        except MalformedSessionRecordError as error:
            self.stats.malformed_records += 1
            log.error("%s offset %d: undecodable result record skipped: %s", self.topic,
                      offset, error)
            return
        if isinstance(record, ResultRows):
            fresh = self.table.add_rows(record)
            if fresh:
                self.on_rows(record.query, fresh)
        elif isinstance(record, QueryDone):
            if self.table.add_done(record):
                self.on_done(record)
        else:
            self.stats.malformed_records += 1
            log.error("%s offset %d: unexpected %s record skipped", self.topic, offset,
                      type(record).__name__)

    def _timeout_message(self) -> str:
        announced = {q: str(done.rows) for q, done in self.table.done.items()}
        state = ", ".join(f"{q}: {len(self.table.rows[q])}/{announced.get(q, '?')} rows"
                          for q in QUERIES)
        return f"results not complete after {self.results_timeout_s:g} s ({state})"
