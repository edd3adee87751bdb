"""Session progress, read from the `sessions` topic and each session's `results.<cid>` topic
(common/session_records.py says what the clients and the query service write there).

Read-only: exact offset ranges with `RangeReader`, which belongs to no consumer group, so
nothing is ever committed in anyone's name. Incremental: each poll reads only the records
appended since the last one. `SessionLedger.apply` is the pure part (records in, progress
out); `SessionTracker` reads the topics and feeds it.

Upload progress is counted in batches (one record per batch of rows): the topics' high
watermarks say how many are stored, and the session's end record says how many there are in
all and how many rows they held.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from common.kaska.errors import KaskaError
from common.kaska.range_reader import RangeReader
from common.session_records import (
    QUERIES,
    SESSIONS_TOPIC,
    MalformedSessionRecordError,
    QueryDone,
    ResultRows,
    SessionEnded,
    SessionStarted,
    decode,
    results_topic,
)

ACKED_RECORD = "ResultsAcked"  # the client's "I hold every result file" record
RETRY_DEADLINE_S = 2.0  # a poll must not hang on an outage: the next one tries again
FETCH_WAIT_MS = 0  # never long-poll: we read only below the high watermark

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryProgress:
    done: bool = False
    result_rows: int = 0  # rows received so far (all of them once done)


@dataclass(frozen=True)
class SessionProgress:
    client_id: str
    partitions: int = 0
    ended: bool = False
    batches_total: int | None = None  # known once ended: the sum of its end offsets
    rows_sent: int | None = None  # known once ended
    rows_rejected: int | None = None
    acked: bool = False  # the client saved every result (its topics may be deleted since)
    queries: dict[str, QueryProgress] = field(
        default_factory=lambda: {query: QueryProgress() for query in QUERIES})

    @property
    def done(self) -> bool:
        return self.acked or all(progress.done for progress in self.queries.values())


class SessionLedger:
    """Every session seen, oldest dropped past `sessions_max`. Not thread-safe: the poller's."""

    def __init__(self, sessions_max: int) -> None:
        self.sessions_max = sessions_max
        self.sessions: OrderedDict[str, SessionProgress] = OrderedDict()

    def apply_session_record(self, record) -> None:
        if isinstance(record, SessionStarted):
            old = self.sessions.get(record.client_id, SessionProgress(record.client_id))
            self._put(replace(old, partitions=record.partitions))
        elif isinstance(record, SessionEnded):
            old = self.sessions.get(record.client_id, SessionProgress(record.client_id))
            self._put(replace(
                old, ended=True,
                batches_total=sum(sum(ends) for ends in record.end_offsets.values()),
                rows_sent=sum(record.rows_sent.values()),
                rows_rejected=sum(record.rows_rejected.values())))
        elif type(record).__name__ == ACKED_RECORD and record.client_id in self.sessions:
            # Matched by name: logs written before this record type existed lack it, and this
            # reader must read both. Once acked, the query service may delete the results
            # topic, so the queries are done whatever was read of it, with the rows the client
            # says it saved (acks written before that field existed say nothing).
            old = self.sessions[record.client_id]
            saved = getattr(record, "rows_per_query", None) or {}
            self.sessions[record.client_id] = replace(old, acked=True, queries={
                query: replace(progress, done=True,
                               result_rows=max(progress.result_rows, saved.get(query, 0)))
                for query, progress in old.queries.items()})

    def apply_result_record(self, client_id: str, record) -> None:
        session = self.sessions.get(client_id)
        if session is None or not isinstance(record, ResultRows | QueryDone):
            return
        old = session.queries[record.query]
        if isinstance(record, QueryDone):
            new = QueryProgress(done=True, result_rows=record.rows)
        else:  # a repeated slice (a re-run job) does not count twice: rows are numbered
            new = replace(old, result_rows=max(old.result_rows,
                                               record.first_row + len(record.rows)))
        self.sessions[client_id] = replace(session, queries={**session.queries,
                                                             record.query: new})

    def _put(self, session: SessionProgress) -> None:
        self.sessions[session.client_id] = session
        while len(self.sessions) > self.sessions_max:
            self.sessions.popitem(last=False)


class SessionTracker:
    """Reads the topics incrementally into a `SessionLedger`."""

    def __init__(self, brokers: str, token: str | None, sessions_max: int,
                 request_timeout_s: float) -> None:
        self.ledger = SessionLedger(sessions_max)
        self._reader = RangeReader(brokers, token=token, retry_deadline_s=RETRY_DEADLINE_S,
                                   fetch_wait_ms=FETCH_WAIT_MS,
                                   request_timeout_s=request_timeout_s,
                                   connect_timeout_s=request_timeout_s)
        self._positions: dict[str, int] = {}  # topic (one partition each) -> next offset

    def poll(self) -> None:
        """Reads what is new; raises KaskaError when the cluster cannot be read (the ledger
        keeps what it had)."""
        for record in self._new_records(SESSIONS_TOPIC):
            self.ledger.apply_session_record(record)
        for client_id, session in list(self.ledger.sessions.items()):
            if session.done:
                continue  # nothing more will change
            try:
                for record in self._new_records(results_topic(client_id)):
                    self.ledger.apply_result_record(client_id, record)
            except KaskaError as error:  # e.g. the results topic does not exist yet
                log.debug("results of %s not readable yet: %s", client_id, error)

    def _new_records(self, topic: str) -> list:
        start = self._positions.get(topic, 0)
        end = self._reader.offsets(topic, 0)[1]
        records = []
        for entry in self._reader.read(topic, 0, start, end):
            try:
                records.append(decode(entry.value))
            except MalformedSessionRecordError as error:
                log.warning("skipping a malformed record at %s/%d: %s", topic, entry.offset,
                            error)
        self._positions[topic] = end
        return records

    def close(self) -> None:
        self._reader.close()
