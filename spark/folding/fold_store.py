"""Every live session's folded state, between the streaming query that folds micro-batches into
it and the workers that finish sessions from it.

Owns: the `SessionState` of each registered, unfinished session (by session key), the result
writers of the streamed queries (Q1, Q2) per session, and what the stream has folded so far
(the end offsets of the newest folded micro-batch, from the checkpoint's offset log).

The life of a session here:
1. `register` (the main loop, on SessionStarted): its airports file is written; from then on
   the gate admits `flights.<cid>` (spark/folding/stream_fields.py).
2. `fold` (the query's foreachBatch, micro-batch B): per session in B, its Q1 and Q2 rows are
   written to `results.<cid>` (row and sequence numbers going on from the state's counters: a
   B run again writes the very same batches, which the broker drops), then the state takes B
   and saves its fold file. Before that, parts up to B - 1 (committed, or Spark would not run
   B) may be compacted.
3. `mark_ended` (the main loop, on SessionEnded): its end offsets capped in `ended.json`.
4. `wait_folded` / `finish` (a session worker): once the stream has folded past the end
   offsets, Q3 and Q4 are computed from the state (spark/folding/finish.py) and written, the
   four QueryDone records after them, then the `finished` marker; the fold files go.
5. `forget` (the main loop, once the client acknowledged and the topics are gone).

Exactly once: results are written with deterministic producer ids and sequence numbers
(spark/service/result_writer.py), so any step redone after a crash writes nothing new; a state is
rebuilt from its fold files as of Spark's last committed micro-batch (`recover`), and Spark
runs the uncommitted one again with the same offsets.

Thread-safety: one lock guards the states, the writers and the progress; the slow parts (a
micro-batch's result writes, a finish's writes) run outside it on state the other threads do
not touch (a session's rows stop coming before its finish starts: the gate caps its topic).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from common.flights.session_records import QUERIES, flights_topic
from spark.folding.batch_fold import BatchFold, Partial, fold_of
from spark.folding.finish import mean_fare, q3_table, q4_table
from spark.folding.session_files import (
    SessionFiles,
    session_dirs,
    session_key,
    write_atomically,
)
from spark.folding.session_state import STREAMED_QUERIES, SessionState
from spark.rules.airport_distances import AirportCoordinates
from spark.rules.result_columns import format_table
from spark.service.result_writer import QueryResultWriter

log = logging.getLogger(__name__)
UNKNOWN_AIRPORT = "unknown_airport"
FOLDED_WAIT_POLL_S = 0.5


class SessionKeyCollisionError(Exception):
    """Two live sessions whose client ids hash to the same session key: the second is refused
    (one in 2**63 per pair; never seen)."""


@dataclass(frozen=True)
class FinishReport:
    client_id: str
    rows: int
    valid_rows: int
    query_rows: dict[str, int]


WriterFactory = Callable[[str, str], QueryResultWriter]  # (client id, query) -> writer


class FoldStore:
    def __init__(self, state_dir: Path, writer_factory: WriterFactory) -> None:
        self.state_dir = Path(state_dir)
        self._new_writer = writer_factory
        self._lock = threading.Condition()
        self._states: dict[int, SessionState] = {}
        self._writers: dict[tuple[str, str], QueryResultWriter] = {}
        self._folded_batch = -1
        self._folded_offsets: dict[str, dict[int, int]] = {}
        self.counts = {"batches_folded": 0, "rows_folded": 0, "rows_unknown_session": 0}

    # -- recovery --------------------------------------------------------------------------

    def recover(self, committed_batch: int) -> None:
        """Every unfinished session's state as of Spark's last committed micro-batch."""
        with self._lock:
            self._close_writers()
            self._states.clear()
            self._folded_batch = committed_batch
            for client_id in session_dirs(self.state_dir):
                files = SessionFiles(self.state_dir, client_id)
                if files.finished.exists() or not files.airports.exists():
                    continue
                state = SessionState(files, session_key(client_id))
                state.load(committed_batch)
                self._states[state.key] = state
        log.info("fold state recovered as of micro-batch %d: %d live session(s)",
                 committed_batch, len(self._states))

    # -- the main loop ---------------------------------------------------------------------

    def is_registered(self, client_id: str) -> bool:
        return SessionFiles(self.state_dir, client_id).airports.exists()

    def register(self, client_id: str, coordinates: AirportCoordinates) -> None:
        """The session's airports: its flights may now be read."""
        files = SessionFiles(self.state_dir, client_id)
        key = session_key(client_id)
        with self._lock:
            other = self._states.get(key)
            if other is not None and other.client_id != client_id:
                raise SessionKeyCollisionError(
                    f"sessions {client_id} and {other.client_id} share key {key}")
            if other is None and not files.finished.exists():
                self._states[key] = SessionState(files, key)
        if not files.airports.exists():
            files.write_json(files.airports, {"key": key, "coordinates": coordinates.by_code})

    def mark_ended(self, client_id: str, flights_end_offsets: list[int]) -> None:
        files = SessionFiles(self.state_dir, client_id)
        if files.read_json(files.ended) != flights_end_offsets:
            files.write_json(files.ended, flights_end_offsets)

    def forget(self, client_id: str) -> None:
        """Drop every trace of a session whose topics are deleted."""
        with self._lock:
            self._states.pop(session_key(client_id), None)
            self._close_writers(client_id)
        SessionFiles(self.state_dir, client_id).remove()

    # -- the stream ------------------------------------------------------------------------

    def fold(self, batch_id: int, partials: Mapping[int, list[Partial]]) -> None:
        """Micro-batch `batch_id`'s partials by session key: each session's part written and
        folded."""
        folds = {key: fold_of(parts) for key, parts in partials.items()}
        with self._lock:
            for state in self._states.values():
                state.compact(batch_id - 1)
            targets = {key: self._states.get(key) for key in folds}
        for key, fold in folds.items():
            state = targets[key]
            if state is None:
                self._count("rows_unknown_session", fold.rows)
                log.error("micro-batch %d: %d rows of session key %d, which is not registered "
                          "(finished or forgotten); not folded", batch_id, fold.rows, key)
                continue
            if batch_id <= state.summary.last_batch:
                continue  # folded before this query restarted in the same process
            written = self._write_streamed(state, fold)
            with self._lock:
                state.add(batch_id, fold, written)
            self._count("rows_folded", fold.rows)
        self._count("batches_folded", 1)

    def _write_streamed(self, state: SessionState, fold: BatchFold) -> dict[str, tuple[int, int]]:
        written = {}
        for query, rows in (("q1", fold.q1), ("q2", fold.q2)):
            first_row, first_sequence = state.summary.written[query]
            if rows.num_rows == 0:
                written[query] = (first_row, first_sequence)
                continue
            writer = self._writer(state.client_id, query)
            written[query] = writer.write_slices(format_table(query, rows), first_row,
                                                 first_sequence)
        return written

    def folded(self, batch_id: int, end_offsets: Mapping[str, Mapping[int, int]]) -> None:
        """The stream's progress: micro-batch `batch_id` is folded, its end offsets these."""
        with self._lock:
            if batch_id <= self._folded_batch and self._folded_offsets:
                return
            self._folded_batch = batch_id
            self._folded_offsets = {topic: dict(offsets) for topic, offsets in
                                    end_offsets.items()}
            self._lock.notify_all()

    # -- finishing -------------------------------------------------------------------------

    def wait_folded(self, client_id: str, end_offsets: list[int], stop: threading.Event,
                    wait_s_max: float) -> bool:
        """Whether the stream folded `flights.<cid>` up to `end_offsets` within `wait_s_max`
        (False also on a stop)."""
        topic = flights_topic(client_id)
        waited_s = 0.0
        with self._lock:
            while not self._passed(topic, end_offsets):
                if stop.is_set() or waited_s >= wait_s_max:
                    return False
                self._lock.wait(FOLDED_WAIT_POLL_S)
                waited_s += FOLDED_WAIT_POLL_S
        return True

    def _passed(self, topic: str, end_offsets: list[int]) -> bool:
        folded = self._folded_offsets.get(topic, {})
        return all(end == 0 or folded.get(partition, 0) >= end
                   for partition, end in enumerate(end_offsets))

    def finish(self, client_id: str) -> FinishReport:
        """Q3 and Q4 written, and every QueryDone (module doc, step 4)."""
        files = SessionFiles(self.state_dir, client_id)
        with self._lock:
            state = self._states.get(session_key(client_id))
            if state is None or state.client_id != client_id:
                raise KeyError(f"session {client_id} has no fold state")
            summary = state.summary
            q4_rows, candidates = state.q4_rows(), state.q3_candidates()
        mean = mean_fare(q4_rows)
        invalid = dict(summary.invalid)
        tables = {"q3": q3_table(candidates), "q4": q4_table(q4_rows, mean)}
        query_rows = {}
        for query in QUERIES:
            writer = self._writer(client_id, query)
            counts = {**invalid, UNKNOWN_AIRPORT: summary.q2_skipped} if query == "q2" \
                else invalid
            if query in STREAMED_QUERIES:
                rows, slices = summary.written[query]
                writer.write_done(rows, slices, counts)
            else:
                rows = writer.write(format_table(query, tables[query]), counts)
            query_rows[query] = rows
        write_atomically(files.finished, b"")
        with self._lock:
            self._states.pop(state.key, None)
            self._close_writers(client_id)
        for batch in files.fold_batches():
            files.fold(batch).unlink(missing_ok=True)
        log.info("session %s finished: %d rows (%d valid), mean fare %s, result rows %s",
                 client_id, summary.rows, summary.valid_rows, mean, query_rows)
        return FinishReport(client_id, summary.rows, summary.valid_rows, query_rows)

    def is_finished(self, client_id: str) -> bool:
        return SessionFiles(self.state_dir, client_id).finished.exists()

    # -- helpers ---------------------------------------------------------------------------

    def progress(self) -> dict[str, dict]:
        """Per live session: rows folded and results written so far (status, metrics)."""
        with self._lock:
            return {state.client_id: {"rows_folded": state.summary.rows,
                                      "last_batch": state.summary.last_batch,
                                      "written": {q: rows for q, (rows, _) in
                                                  state.summary.written.items()}}
                    for state in self._states.values()}

    def _writer(self, client_id: str, query: str) -> QueryResultWriter:
        with self._lock:
            writer = self._writers.get((client_id, query))
            if writer is None:
                writer = self._writers[(client_id, query)] = self._new_writer(client_id, query)
            return writer

    def _close_writers(self, client_id: str | None = None) -> None:
        for key in [k for k in self._writers if client_id is None or k[0] == client_id]:
            self._writers.pop(key).close()

    def _count(self, name: str, amount: int) -> None:
        with self._lock:
            self.counts[name] += amount
