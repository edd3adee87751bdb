"""Session progress, read from the `sessions` topic and each session's `results.<cid>` topic
(common/flights/session_records.py says what the clients and the query service write there).

Read-only: exact offset ranges with `RangeReader`, which belongs to no consumer group, so
nothing is ever committed in anyone's name. Incremental: each poll reads only the records
appended since the last one. `SessionLedger.apply` is the pure part (records in, progress
out); `SessionTracker` reads the topics and feeds it.

Upload progress is counted in batches (one record per batch of rows): the topics' high
watermarks say how many are stored, and the session's end record says how many there are in
all and how many rows they held.

Folding progress, per session, of its `flights.<cid>` topic, from one ListOffsets answer per
partition (its leader's log start offset and high watermark, read together): the query
service moves a partition's log start past what a committed micro-batch folded (DeleteRecords,
spark/folding/prefix_release.py), so `folded_records` = the sum of the log starts,
`stored_records` = the sum of the high watermarks, and the backlog (stored - folded) is what
the fold holds but has not released. Polled while it can still move: the session is not
acknowledged (an acknowledged session's topics may be deleted) and not done with a backlog of
0; at most `offset_requests_per_poll_max` requests a poll, the sessions taking turns. A
session whose offsets cannot be read (its topics gone, an outage) keeps its last values; the
offsets of a session are applied all together or not at all.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from common.flights.session_records import (
    QUERIES,
    SESSIONS_TOPIC,
    MalformedSessionRecordError,
    QueryDone,
    ResultRows,
    SessionEnded,
    SessionStarted,
    decode,
    flights_topic,
    results_topic,
)
from common.kaska.errors import KaskaError
from common.kaska.range_reader import RangeReader

ACKED_RECORD = "ResultsAcked"  # the client's "I hold every result file" record
RETRY_DEADLINE_S = 2.0  # a poll must not hang on an outage: the next one tries again
FETCH_WAIT_MS = 0  # never long-poll: we read only below the high watermark
# ListOffsets requests a poll may send for the folding progress (one per flights partition):
# 64 sessions of 4 partitions each, every poll.
OFFSET_REQUESTS_PER_POLL_MAX_DEFAULT = 256

log = logging.getLogger(__name__)


class InconsistentOffsetsError(ValueError):
    """A partition's log start offset above its high watermark: an answer not to be shown."""


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
    # The flights topic's offsets as last read (None: never read): the sum over its partitions
    # of the log start offsets (records folded and released) and of the high watermarks.
    folded_records: int | None = None
    stored_records: int | None = None

    @property
    def done(self) -> bool:
        return self.acked or all(progress.done for progress in self.queries.values())

    @property
    def backlog_records(self) -> int | None:
        """Stored records the fold has not released yet (None until the offsets are read)."""
        if self.folded_records is None or self.stored_records is None:
            return None
        return self.stored_records - self.folded_records

    @property
    def folding_may_move(self) -> bool:
        """Whether its flights offsets are worth reading again."""
        if self.acked or self.partitions < 1:
            return False  # its topics may be gone; or no SessionStarted seen: no partitions
        return not self.done or self.backlog_records != 0


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

    def apply_flights_offsets(self, client_id: str,
                              offsets: Sequence[tuple[int, int]]) -> None:
        """The (log start offset, high watermark) of every partition of the session's flights
        topic, read together; a session forgotten meanwhile is ignored."""
        session = self.sessions.get(client_id)
        if session is None:
            return
        for start, high in offsets:
            if not 0 <= start <= high:
                raise InconsistentOffsetsError(
                    f"{client_id}: log start {start} above high watermark {high}")
        self.sessions[client_id] = replace(
            session, folded_records=sum(start for start, _ in offsets),
            stored_records=sum(high for _, high in offsets))

    def folding_to_read(self) -> list[str]:
        """The sessions whose folding progress may still move, oldest first."""
        return [cid for cid, session in self.sessions.items() if session.folding_may_move]

    def _put(self, session: SessionProgress) -> None:
        self.sessions[session.client_id] = session
        while len(self.sessions) > self.sessions_max:
            self.sessions.popitem(last=False)


class SessionTracker:
    """Reads the topics incrementally into a `SessionLedger`. `reader` is for tests (a fake
    with `offsets` and `read`)."""

    def __init__(self, brokers: str, token: str | None, sessions_max: int,
                 request_timeout_s: float,
                 offset_requests_per_poll_max: int = OFFSET_REQUESTS_PER_POLL_MAX_DEFAULT,
                 reader: RangeReader | None = None) -> None:
        assert offset_requests_per_poll_max >= 1
        self.ledger = SessionLedger(sessions_max)
        self._reader = reader or RangeReader(
            brokers, token=token, retry_deadline_s=RETRY_DEADLINE_S, fetch_wait_ms=FETCH_WAIT_MS,
            request_timeout_s=request_timeout_s, connect_timeout_s=request_timeout_s)
        self._positions: dict[str, int] = {}  # topic (one partition each) -> next offset
        self.offset_requests_per_poll_max = offset_requests_per_poll_max
        self._folding_turn = 0  # where the next poll's reading of the flights offsets starts
        self.offset_requests = 0  # ListOffsets sent for the folding progress, in all
        self.offset_errors = 0  # sessions whose flights offsets could not be read or made no sense
        self._too_wide: set[str] = set()  # sessions of more partitions than a poll may ask

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
        self._poll_folding()

    def _poll_folding(self) -> None:
        """The flights offsets of the sessions whose folding may move, in turns: each poll
        starts where the last one's budget ran out."""
        self._too_wide &= self.ledger.sessions.keys()  # forgotten sessions: forgotten here too
        due = [cid for cid in self.ledger.folding_to_read() if self._fits_a_poll(cid)]
        if not due:
            return
        start = self._folding_turn % len(due)
        budget = self.offset_requests_per_poll_max
        read = 0
        for client_id in due[start:] + due[:start]:
            partitions = self.ledger.sessions[client_id].partitions
            if partitions > budget:
                break  # its turn comes first in the next poll
            budget -= partitions
            read += 1
            self._read_flights_offsets(client_id, partitions)
        self._folding_turn = start + read

    def _fits_a_poll(self, client_id: str) -> bool:
        """Whether a poll may ask all its partitions; a session that never does is skipped,
        counted and logged once."""
        partitions = self.ledger.sessions[client_id].partitions
        if partitions <= self.offset_requests_per_poll_max:
            return True
        if client_id not in self._too_wide:
            self._too_wide.add(client_id)
            self.offset_errors += 1
            log.warning("session %s has %d partitions, over the %d offset requests a poll may "
                        "send: its folding progress is not read", client_id, partitions,
                        self.offset_requests_per_poll_max)
        return False

    def _read_flights_offsets(self, client_id: str, partitions: int) -> None:
        topic = flights_topic(client_id)
        try:
            offsets = []
            for partition in range(partitions):
                self.offset_requests += 1
                offsets.append(self._reader.offsets(topic, partition))
            self.ledger.apply_flights_offsets(client_id, offsets)
        except (KaskaError, InconsistentOffsetsError) as error:  # the last values stay
            self.offset_errors += 1
            log.debug("flights offsets of %s not readable: %s", client_id, error)

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
