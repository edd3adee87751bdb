"""Receiving a session's results: follow `results.<cid>` until Q1-Q4 are complete, once each.

The query service writes, per query, ResultRows slices (rows numbered from 0 by `first_row`)
and then one QueryDone{rows} (common/flights/session_records.py). A re-run of the service may
write a slice or a QueryDone again; `ResultTable` keeps the first copy of each (query, row
number) and counts the others as duplicates (the topic is this client's alone, so the client id
is implicit in the key). A query is complete when its QueryDone arrived and rows 0 .. rows-1
all did; a row number below 0 or at or beyond QueryDone.rows, or a row whose field count is
not its query's column count, raises `InconsistentResultsError`.

`ResultTable` holds no query's rows: it passes each query's rows on to its sinks
(`ResultSink`: the result files, the report's charts) in row-number order, each row once, as
soon as every row before it arrived, and tells them when the query is complete. It remembers
only the next row number each query expects; a row that arrives ahead of a gap (the service
writes slices in order, so only a bug makes one) waits in a small map, at most
`rows_ahead_max` rows, until the gap fills.

`ResultsFollower` reads the topic from offset 0 (so a restarted client passes the same rows to
fresh sinks), hands new rows to a callback (the console printer) as they arrive, and returns
when all four queries are complete; it raises `ResultsTimeoutError` after `results_timeout_s`
and `ResultsInterruptedError` when the stop event is set. Undecodable records are counted and
logged, never fatal. Consumer errors ride out broker restarts (`common.kaska.patience`).

Thread-safety: all classes are used by one thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from common.flights.result_csv import QUERY_HEADERS
from common.flights.session_records import (
    QUERIES,
    MalformedSessionRecordError,
    QueryDone,
    ResultRows,
    decode,
    results_topic,
)
from common.kaska import Consumer
from common.kaska.patience import STALL_TIMEOUT_S_DEFAULT, persist

log = logging.getLogger(__name__)

RESULTS_TIMEOUT_S_DEFAULT = 3600.0
POLL_TIMEOUT_S = 0.5
RESULTS_PARTITION = 0
# Rows held while a gap before them fills, per query; more means the topic is not what the
# service writes (it writes slices in order).
ROWS_AHEAD_MAX_DEFAULT = 100_000


class ResultsError(Exception):
    """Base of the result-collection errors."""


class InconsistentResultsError(ResultsError):
    """A row outside what the query's QueryDone announced, of the wrong shape, or too far
    ahead of the rows before it."""


class ResultsTimeoutError(ResultsError):
    """The results were not complete within `results_timeout_s`."""


class ResultsInterruptedError(ResultsError):
    """The stop event was set before the results were complete."""


NewRowsCallback = Callable[[str, list[list[str]]], None]  # (query, rows not seen before)


class ResultSink(Protocol):
    """Where a query's rows go, in row-number order, each exactly once."""

    def add(self, query: str, rows: list[list[str]]) -> None:
        """The query's next rows (the first is the row after the last one added)."""

    def finish(self, query: str) -> None:
        """Every row of the query has been added; called once per query."""


@dataclass
class ResultTable:
    """Deduplicates and orders every query's rows into the sinks (rules: module doc)."""

    sinks: Sequence[ResultSink] = ()
    rows_ahead_max: int = ROWS_AHEAD_MAX_DEFAULT
    next_row: dict[str, int] = field(default_factory=lambda: dict.fromkeys(QUERIES, 0))
    ahead: dict[str, dict[int, list[str]]] = field(
        default_factory=lambda: {query: {} for query in QUERIES})
    done: dict[str, QueryDone] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    duplicate_rows: int = 0
    duplicate_done: int = 0

    def add_rows(self, record: ResultRows) -> list[list[str]]:
        """Take the record's rows; the ones not seen before, in the record's order."""
        query = record.query
        ahead = self.ahead[query]
        if record.first_row == self.next_row[query] and not ahead:
            return self._add_next(record)  # the usual case: the slice after the last one
        fresh, in_order = [], []
        for number, row in enumerate(record.rows, start=record.first_row):
            if number < 0:
                raise InconsistentResultsError(f"{query} row {number}: a negative row number")
            if number < self.next_row[query] or number in ahead:
                self.duplicate_rows += 1
                continue
            self._check_row(query, number, row)
            fresh.append(row)
            if number == self.next_row[query]:
                in_order.append(row)
                self._advance(query, in_order)
            else:
                self._hold(query, number, row)
        if in_order:
            for sink in self.sinks:
                sink.add(query, in_order)
        self._finish_if_complete(query)
        return fresh

    def _add_next(self, record: ResultRows) -> list[list[str]]:
        """`add_rows` of a record that starts at the query's next row, none held."""
        query, rows = record.query, record.rows
        width = len(QUERY_HEADERS[query])
        if not all(len(row) == width for row in rows):
            for number, row in enumerate(rows, start=record.first_row):
                self._check_row(query, number, row)
        if rows:
            self._check_row(query, record.first_row + len(rows) - 1, rows[-1])
            self.next_row[query] += len(rows)
            for sink in self.sinks:
                sink.add(query, rows)
        self._finish_if_complete(query)
        return list(rows)

    def add_done(self, record: QueryDone) -> bool:
        """Take the QueryDone; False for a repeat."""
        query = record.query
        if query in self.done:
            self.duplicate_done += 1
            if record.rows != self.done[query].rows:
                log.warning("%s: a repeated QueryDone says %d rows, the first said %d",
                            query, record.rows, self.done[query].rows)
            return False
        last = max(self.ahead[query], default=self.next_row[query] - 1)
        if last >= record.rows:
            raise InconsistentResultsError(
                f"{query} row {last} outside the announced {record.rows} rows")
        self.done[query] = record
        self._finish_if_complete(query)
        return True

    def _check_row(self, query: str, number: int, row: list[str]) -> None:
        done = self.done.get(query)
        if done is not None and number >= done.rows:
            raise InconsistentResultsError(
                f"{query} row {number} outside the announced {done.rows} rows")
        width = len(QUERY_HEADERS[query])
        if len(row) != width:
            raise InconsistentResultsError(
                f"{query} row {number} has {len(row)} fields, the query has {width} columns")

    def _advance(self, query: str, in_order: list[list[str]]) -> None:
        """Row next_row was appended to `in_order`: move past it and any held rows after it."""
        ahead = self.ahead[query]
        following = self.next_row[query] + 1
        while following in ahead:
            in_order.append(ahead.pop(following))
            following += 1
        self.next_row[query] = following

    def _hold(self, query: str, number: int, row: list[str]) -> None:
        ahead = self.ahead[query]
        if len(ahead) >= self.rows_ahead_max:
            raise InconsistentResultsError(
                f"{query}: more than {self.rows_ahead_max} rows arrived ahead of row "
                f"{self.next_row[query]}, which has not")
        ahead[number] = row

    def _finish_if_complete(self, query: str) -> None:
        if query not in self.finished and self.is_complete(query):
            self.finished.add(query)
            for sink in self.sinks:
                sink.finish(query)

    def rows_received(self, query: str) -> int:
        return self.next_row[query] + len(self.ahead[query])

    @property
    def rows_held(self) -> int:
        """Rows waiting for a gap to fill, every query together."""
        return sum(len(ahead) for ahead in self.ahead.values())

    def is_complete(self, query: str) -> bool:
        done = self.done.get(query)
        return done is not None and self.next_row[query] == done.rows

    def complete(self) -> bool:
        return all(self.is_complete(query) for query in QUERIES)


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
                 clock: Callable[[], float] = time.monotonic,
                 sinks: Sequence[ResultSink] = ()) -> None:
        self.consumer = consumer
        self.topic = results_topic(client_id)
        self.stop = stop
        self.on_rows = on_rows
        self.on_done = on_done
        self.results_timeout_s = results_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        self.table = ResultTable(sinks)
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
        state = ", ".join(f"{q}: {self.table.rows_received(q)}/{announced.get(q, '?')} rows"
                          for q in QUERIES)
        return f"results not complete after {self.results_timeout_s:g} s ({state})"
