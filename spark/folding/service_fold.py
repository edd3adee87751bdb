"""The query service's side of the fold: what it does with each `sessions` record, and the job
that finishes an ended session.

- SessionStarted (with the airports' end offsets) -> the airports are read over exactly those
  offsets and registered: the stream may now read the session's flights.
- SessionEnded -> registered too if SessionStarted had no end offsets (a client of the earlier
  protocol), then its flights' end offsets capped; a session worker runs `finish_session`:
  wait until the stream folded past the end offsets, then Q3, Q4 and every QueryDone.
- the session's topics deleted (the client acknowledged) -> its files forgotten.

Owns: the `FoldStore`, the `FoldQuery` and its `PrefixReleaser`, and the reader of airports.

Threads: `on_started`, `on_ended` and `on_cleaned` on the service's main loop; `finish_session`
on a session worker; the query and releaser on their own threads (spark/folding/stream_query).
"""

from __future__ import annotations

import logging
import threading

from common.flights.session_records import (
    SessionEnded,
    SessionStarted,
    airports_topic,
    flights_topic,
)
from common.kaska import Admin
from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.range_reader import RangeReader
from spark.folding.airports import read_airports
from spark.folding.fold_store import FinishReport, FoldStore
from spark.folding.prefix_release import PrefixReleaser
from spark.folding.stream_query import FoldQuery, StreamSettings
from spark.folding.warm_up import warm_up_fold
from spark.service.driver import JOB_ERRORS, first_line
from spark.service.result_writer import QueryResultWriter
from spark.service.warm_up import WarmUpError

log = logging.getLogger("spark.service")
STREAM_START_WAIT_S_MAX = 120.0


class FoldNotCaughtUpError(Exception):
    """The stream did not fold a session's rows within the wait: the job is retried."""


class SessionNotRecoverableError(Exception):
    """A session met for the first time (a state directory started afresh) whose flights' first
    records are deleted already: its results cannot be exact, so it gets none."""


class FoldInterruptedError(Exception):
    """A stop came while a finish waited for the fold; redone on the next start."""


class ServiceFold:
    def __init__(self, spark, settings: StreamSettings, stop: threading.Event, *,
                 rows_per_slice: int, slice_pause_s: float = 0.0,
                 fold_wait_s_max: float = 600.0) -> None:
        self.settings = settings
        self.stop_requested = stop
        self.fold_wait_s_max = fold_wait_s_max

        def writer(client_id: str, query: str) -> QueryResultWriter:
            return QueryResultWriter(settings.brokers, client_id, query, token=settings.token,
                                     rows_per_slice=rows_per_slice, slice_pause_s=slice_pause_s,
                                     stop=stop)

        self.store = FoldStore(settings.state_dir, writer)
        self._admin = Admin(settings.brokers, token=settings.token)
        self.releaser = PrefixReleaser(settings.checkpoint, self._delete_records, stop)
        self.query = FoldQuery(spark, settings, self.store, self.releaser, stop)

    def start(self, warm_up_rows: int) -> None:
        """Warm the fold up (spark/folding/warm_up.py), start the stream and wait for its first
        trigger: a first session then pays neither."""
        if warm_up_rows > 0:
            try:
                log.info("fold warmed up in %.1f s (%d sample rows)",
                         warm_up_fold(self.query.spark, warm_up_rows), warm_up_rows)
            except (*JOB_ERRORS, WarmUpError) as error:
                log.warning("the fold's warm-up failed, serving cold: %s: %s",
                            type(error).__name__, first_line(error))
        self.query.start()
        if not self.query.wait_started(STREAM_START_WAIT_S_MAX):
            log.warning("the fold query made no trigger within %.0f s; serving anyway",
                        STREAM_START_WAIT_S_MAX)

    def stop(self) -> None:
        self.query.stop()
        self._admin.close()

    def _delete_records(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        return self._admin.delete_records(topic, offsets)

    # -- sessions records (the main loop) --------------------------------------------------

    def on_started(self, record: SessionStarted) -> None:
        ends = getattr(record, "airports_end_offsets", None)
        if ends is None:
            log.info("session %s started without its airports' end offsets (an earlier "
                     "client); registered at its SessionEnded", record.client_id)
            return
        self._register(record.client_id, ends)

    def on_ended(self, record: SessionEnded) -> None:
        cid = record.client_id
        if not self.store.is_registered(cid) and not self.store.is_finished(cid):
            self._register(cid, record.end_offsets[airports_topic(cid)])
        self.store.mark_ended(cid, record.end_offsets[flights_topic(cid)])

    def on_cleaned(self, client_id: str) -> None:
        self.store.forget(client_id)

    def _register(self, client_id: str, airports_end_offsets: list[int]) -> None:
        if self.store.is_registered(client_id) or self.store.is_finished(client_id):
            return
        with RangeReader(self.settings.brokers, token=self.settings.token,
                         retry_deadline_s=self.settings.retry_deadline_s) as reader:
            try:
                coordinates = read_airports(reader, airports_topic(client_id),
                                            airports_end_offsets)
                _check_flights_whole(reader, client_id, len(airports_end_offsets))
            except UnknownTopicOrPartitionError as error:
                # The client creates every topic before its SessionStarted: a topic missing
                # now was deleted (the session acknowledged, or cleaned up by hand).
                raise SessionNotRecoverableError(
                    f"session {client_id}: its topics are gone ({error})") from error
        self.store.register(client_id, coordinates)
        log.info("session %s registered: %d known airports; its flights are folded as they "
                 "come", client_id, len(coordinates.by_code))

    # -- the finish (a session worker) -----------------------------------------------------

    def finish_session(self, ended: SessionEnded) -> FinishReport:
        cid = ended.client_id
        if self.store.is_finished(cid):
            log.info("session %s: finished already; its results are on the broker", cid)
            return FinishReport(cid, 0, 0, {})
        ends = ended.end_offsets[flights_topic(cid)]
        if not self.store.wait_folded(cid, ends, self.stop_requested, self.fold_wait_s_max):
            if self.stop_requested.is_set():
                raise FoldInterruptedError(f"session {cid}: stopped waiting for the fold")
            raise FoldNotCaughtUpError(f"session {cid}: not folded up to {ends} within "
                                       f"{self.fold_wait_s_max:.0f} s")
        return self.store.finish(cid)


def _check_flights_whole(reader: RangeReader, client_id: str, partitions: int) -> None:
    """SessionNotRecoverableError unless every flights partition still starts at offset 0: the
    stream reads a newly admitted topic from its log start, which must be the session's start
    (a state directory lost while a session's prefix was released cannot fold it again)."""
    topic = flights_topic(client_id)
    starts = [reader.offsets(topic, partition)[0] for partition in range(partitions)]
    if any(starts):
        raise SessionNotRecoverableError(
            f"session {client_id}: {topic} starts at {starts}, not at 0: its first records were "
            "folded and released by an earlier state of this service, which is gone")
