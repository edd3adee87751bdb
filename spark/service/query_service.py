"""The query service's main loop: follow `sessions`, hand SessionEnded to the workers, commit,
and delete the topics of acknowledged sessions.

Owns: `QueryService` (the reading of `sessions` from the committed position, the decoding and
validation of each record, the job cursor and the cleanup cursor with their commits, the
deletion of finished sessions' topics, waiting for an unreachable broker) and the consumer
groups' names. The rules it follows are spark/service/__main__.py's module doc; the jobs run in
spark/service/session_workers.py, the deletion rules are spark/service/session_cleanup.py's.

Invariants: a position is committed only when every session before it is finished
(`SessionProgress`); records below the job cursor (read again for the cleanup) start no job,
nor does a SessionEnded its client acknowledged later in what was written before the start
(spark/service/acks_ahead.py);
the loop stops reading while `sessions_pending_max` sessions are picked up but unfinished; a
session's topics are never deleted while its job runs nor before its SessionEnded is
committed; nothing on the topic crashes the loop (malformed records are counted and skipped).

Threads: `run` is the main loop, on the caller's thread; the workers report through a queue;
`counts` is updated under a lock from both and read by the metrics scrape; `request_stop` may
be called from any thread (a signal handler).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time

from common.backoff import Backoff
from common.flights.session_records import (
    SESSIONS_TOPIC,
    MalformedSessionRecordError,
    ResultsAcked,
    SessionEnded,
    SessionStarted,
    decode,
    session_topics,
)
from common.kaska import Admin, Consumer, Message
from common.kaska.errors import (
    InvalidTopicError,
    KaskaError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from common.kaska.patience import BrokerRefusedError, StoppedWhileWaitingError, persist
from common.kaska.range_reader import RangeReader
from common.kaska.retry import RetryPolicy
from common.kaska.topic_name import validate_topic_name
from common.liveness import Liveness
from spark.folding.fold_store import SessionKeyCollisionError
from spark.folding.service_fold import SessionNotRecoverableError
from spark.service.acks_ahead import AcksAhead, read_acks_ahead
from spark.service.metrics import JobMetrics
from spark.service.progress_store import (
    PROGRESS_STORE_NAME,
    BrokerProgressStore,
    FileProgressStore,
    commit_progress,
)
from spark.service.service_settings import ServiceSettings
from spark.service.session_cleanup import SessionCleanup, retention_due_s
from spark.service.session_job import validate_session
from spark.service.session_progress import SessionProgress
from spark.service.session_workers import SessionWorkers

# The service's one logger, as before the split: its log lines read the same.
log = logging.getLogger("spark.service")

CONSUMER_GROUP = "query-service"
CLEANUP_GROUP = "query-service-cleanup"
CLEANUP_STORE_NAME = "sessions-cleanup"
# Deletions run in the main loop: a broker that does not answer costs seconds, not minutes.
CLEANUP_ADMIN_OPTIONS = {"request_timeout_s": 5.0, "retry": RetryPolicy(retries_max=3)}
POLL_TIMEOUT_S = 0.5
# The start-up read of acks ahead (spark/service/acks_ahead.py) is an optimisation: a broker that
# does not answer within this bound costs a redone job, not a slow start or a slow SIGTERM.
ACKS_SCAN_DEADLINE_S = 5.0
BROKER_BACKOFF = Backoff(initial_s=0.2, max_s=5.0)


class ServiceStopping(Exception):
    """A stop was requested while the service waited for the broker."""



class QueryService:
    def __init__(self, settings: ServiceSettings, spark,
                 stop_requested: threading.Event | None = None,
                 clock=time.monotonic, wall_clock=time.time, fold=None) -> None:
        self.settings = settings
        self.spark = spark
        self.stop_requested = stop_requested or threading.Event()
        self.counts = {"sessions_done": 0, "sessions_given_up": 0, "records_skipped": 0,
                       "records_malformed": 0, "sessions_started": 0, "sessions_picked_up": 0,
                       "sessions_acked": 0, "sessions_cleaned": 0, "session_topics_deleted": 0,
                       "sessions_malformed_payload": 0, "sessions_acked_before_start": 0}
        self._counts_lock = threading.Lock()
        self.metrics = JobMetrics()  # read by spark.service.metrics at scrape time
        self._clock = clock
        self._wall_clock = wall_clock
        self._progress = SessionProgress()
        self._committed: dict[int, int] = {}
        self._jobs_from: dict[int, int] = {}  # partition -> first offset that may start a job
        self._acks_ahead = AcksAhead()  # acknowledged sessions the job cursor has not passed
        # Topic deletion of acknowledged sessions (None: kept) and its own cursor.
        self._cleanup = SessionCleanup(settings.finished_session_retention_s) \
            if settings.deletes_finished_sessions else None
        self._cleanup_progress = SessionProgress()
        self._cleanup_from: dict[int, int] = {}
        self._cleanup_committed: dict[int, int] = {}
        # The streaming fold (spark/folding/service_fold.py), or None: a batch job per session.
        self._fold = fold
        # Touched each turn of run()'s loop (and each try while the broker is away): the
        # service's /healthz (common/liveness.py). None until run() starts (Spark warms up).
        self.session_loop_progress: Liveness | None = None
        # Sessions picked up and not finished, as of the loop's last turn: one int the metrics
        # scrape may read from its thread (SessionProgress itself is the loop's alone).
        self.sessions_pending = 0
        self._workers = SessionWorkers(settings, spark, self.stop_requested, self.metrics,
                                       self._count,
                                       job=None if fold is None else
                                       lambda ended, _pool: fold.finish_session(ended))

    # -- main loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until `request_stop`; unfinished sessions stay uncommitted."""
        self.session_loop_progress = Liveness("session loop", self._clock)
        consumer = Consumer(self.settings.brokers, CONSUMER_GROUP, token=self.settings.token)
        cleanup_consumer = admin = None
        try:
            store = self._progress_store(consumer)
            cleanup_store = None
            if self._cleanup is not None:
                cleanup_consumer = Consumer(self.settings.brokers, CLEANUP_GROUP,
                                            token=self.settings.token)
                cleanup_store = self._progress_store(cleanup_consumer, CLEANUP_STORE_NAME)
                admin = Admin(self.settings.brokers, token=self.settings.token,
                              **CLEANUP_ADMIN_OPTIONS)
            self.start_workers()
            self._assign(consumer, store, cleanup_store)
            while not self.stop_requested.is_set():
                self.session_loop_progress.touch()
                self.sessions_pending = self._progress.pending()
                full = self.sessions_pending >= self.settings.sessions_pending_max or (
                    self._cleanup is not None and self._cleanup.full())
                self.absorb_finished(store, wait_s=POLL_TIMEOUT_S if full else 0.0)
                if admin is not None:
                    self.clean_up(admin, cleanup_store)
                if not full:
                    self._poll_once(consumer)
            self.absorb_finished(store, wait_s=0.0)
        except ServiceStopping:
            log.info("stopped while waiting for the broker")
        finally:
            self.stop_workers()
            for closable in (consumer, cleanup_consumer, admin):
                if closable is not None:
                    closable.close()

    def _progress_store(self, consumer: Consumer, file_name: str = PROGRESS_STORE_NAME):
        if self.settings.checkpoint_dir is not None:
            return FileProgressStore(self.settings.checkpoint_dir, file_name)
        if self._fold is not None:
            # Beside the stream's checkpoint and the fold state: a registered session must not
            # be forgotten by a service that kept its place in `sessions` but lost its state.
            return FileProgressStore(self.settings.state_dir, file_name)
        return BrokerProgressStore(consumer)

    def _assign(self, consumer: Consumer, store, cleanup_store) -> None:
        """Start every partition of `sessions` at its checkpoint (or the log start: a session
        that ended before the service's first start must not be missed); with topic deletion
        on, at the cleanup cursor when that one is lower (module doc)."""
        partitions = self._until_broker_answers(lambda: self._sessions_partitions())
        ahead: dict[int, tuple[int, int]] = {}
        for partition in range(partitions):
            committed = self._until_broker_answers(lambda p=partition: store.load(p))
            position = committed if committed is not None else self._until_broker_answers(
                lambda p=partition: consumer.start_offset(SESSIONS_TOPIC, p))
            cleanup_position = None
            if cleanup_store is not None:
                cleanup_position = self._until_broker_answers(
                    lambda p=partition: cleanup_store.load(p))
            end = self._until_broker_answers(
                lambda p=partition: consumer.end_offset(SESSIONS_TOPIC, p))
            ahead[partition] = (position, max(position, end))
            self.assign_partition(partition, position, cleanup_position)
            start = min(position, self._cleanup_from.get(partition, position))
            consumer.seek(SESSIONS_TOPIC, start, partition)
            log.info("following %s/%d from offset %d (%s; cleanup cursor at %s)",
                     SESSIONS_TOPIC, partition, start,
                     "checkpoint" if committed is not None else "log start, no checkpoint",
                     self._cleanup_from.get(partition, "-"))
        reader = RangeReader(self.settings.brokers, token=self.settings.token,
                             retry_deadline_s=ACKS_SCAN_DEADLINE_S)
        try:
            self.note_acks_ahead(read_acks_ahead(reader, ahead))
        finally:
            reader.close()

    def note_acks_ahead(self, ahead: AcksAhead) -> None:
        """Sessions acknowledged above the job cursor at start: their SessionEnded below the
        ack starts no job (spark/service/acks_ahead.py)."""
        self._acks_ahead = ahead

    def assign_partition(self, partition: int, position: int,
                         cleanup_position: int | None = None) -> None:
        """Jobs start from records of `partition` at `position`, which is already committed;
        acks are taken from `cleanup_position` (None: `position`, as on a first start)."""
        self._progress.start(partition, position)
        self._committed[partition] = position
        self._jobs_from[partition] = position
        if self._cleanup is not None:
            cleanup_from = position if cleanup_position is None else cleanup_position
            self._cleanup_progress.start(partition, cleanup_from)
            self._cleanup_from[partition] = cleanup_from
            self._cleanup_committed[partition] = cleanup_from

    def _sessions_partitions(self) -> int:
        with Admin(self.settings.brokers, token=self.settings.token) as admin:
            try:
                admin.create_topic(SESSIONS_TOPIC, 1)
            except TopicAlreadyExistsError:
                pass  # the usual case: clients or an earlier start made it
            return admin.topics()[SESSIONS_TOPIC]

    def _until_broker_answers(self, call):
        """`call()`, retried with backoff while the broker is unreachable (until stopped); a
        non-retriable error is raised as it came."""
        def touched_call():
            if self.session_loop_progress is not None:
                self.session_loop_progress.touch()  # waiting for the broker is progress too
            return call()

        try:
            return persist(touched_call, "broker", self.stop_requested,
                           stall_timeout_s=math.inf, backoff=BROKER_BACKOFF)
        except StoppedWhileWaitingError as stopped:
            raise ServiceStopping() from stopped
        except BrokerRefusedError as refused:
            assert refused.__cause__ is not None, "persist chains the broker's error"
            raise refused.__cause__ from None

    def _poll_once(self, consumer: Consumer) -> None:
        try:
            message = consumer.poll(POLL_TIMEOUT_S)
        except OffsetOutOfRangeError as error:
            self._skip_deleted(consumer, error)
            return
        except KaskaError as error:
            if not error.retriable:
                raise
            log.warning("polling %s failed (%s: %s); retrying", SESSIONS_TOPIC,
                        type(error).__name__, error)
            self.stop_requested.wait(1.0)
            return
        if message is not None:
            self.handle(message)

    def _skip_deleted(self, consumer: Consumer, error: OffsetOutOfRangeError) -> None:
        """Retention deleted records we had not read: go on from the log start, loudly."""
        for partition in self._progress.partitions():
            start = self._until_broker_answers(
                lambda p=partition: consumer.start_offset(SESSIONS_TOPIC, p))
            if consumer.position(SESSIONS_TOPIC, partition) < start:
                log.error("%s/%d: records below %d were deleted before they were read (%s); "
                          "their sessions get no results", SESSIONS_TOPIC, partition, start,
                          error)
                consumer.seek(SESSIONS_TOPIC, start, partition)
                self._progress.skip_to(partition, start)
                if self._cleanup is not None:
                    self._cleanup_progress.skip_to(partition, start)

    def handle(self, message: Message) -> None:
        """Take the next `sessions` record: a SessionEnded goes to a worker, a ResultsAcked to
        the cleanup, anything else is finished at once (malformed ones counted and logged).
        A record below the job cursor (read again for the cleanup) starts no job."""
        partition, offset = message.partition, message.offset
        for_jobs = offset >= self._jobs_from[partition]
        for_cleanup = self._cleanup is not None and offset >= self._cleanup_from[partition]
        if for_jobs:
            self._progress.picked(partition, offset)
        if for_cleanup:
            self._cleanup_progress.picked(partition, offset)
        record = self._decode(message, counted=for_jobs)
        self._take_for_cleanup(message, record, for_cleanup)
        if for_jobs:
            self._take_for_jobs(message, record)

    def _decode(self, message: Message, counted: bool):
        """The record, or None when it is malformed (logged, and counted when `counted`)."""
        where = f"{SESSIONS_TOPIC}/{message.partition}@{message.offset}"
        try:
            record = decode(message.value)
            if isinstance(record, SessionEnded):
                validate_session(record)
            elif isinstance(record, ResultsAcked):
                validate_acked(record)
        except (MalformedSessionRecordError, RecursionError) as error:
            # RecursionError: JSON nested deeper than the parser's stack; just as malformed.
            if counted:
                self._count("records_malformed")
            log.warning("skipping malformed record at %s: %s (%d malformed so far)", where,
                        error, self.counts["records_malformed"])
            return None
        return record

    def _take_for_cleanup(self, message: Message, record, for_cleanup: bool) -> None:
        partition, offset = message.partition, message.offset
        if self._cleanup is not None and isinstance(record, SessionEnded):
            self._cleanup.ended(record.client_id, partition, offset)
        if not for_cleanup:
            return
        if not isinstance(record, ResultsAcked):
            self._cleanup_progress.finished(partition, offset)
            return
        age_s = self._wall_clock() - message.timestamp_ms / 1000
        self._cleanup.acked(record.client_id, partition, offset, self._clock(), age_s)
        log.info("session %s: results acknowledged by the client (%s/%d@%d); its topics go in "
                 "%.0f s at the earliest", record.client_id, SESSIONS_TOPIC, partition, offset,
                 retention_due_s(0.0, self._cleanup.retention_s, age_s))

    def _take_for_jobs(self, message: Message, record) -> None:
        if not isinstance(record, SessionEnded):
            if isinstance(record, ResultsAcked):
                self._count("sessions_acked")
            elif record is not None:
                self._count("records_skipped")
                if isinstance(record, SessionStarted):
                    self._count("sessions_started")
                    if not self._acks_ahead.acknowledged_later(
                            message.partition, message.offset, record.client_id):
                        self._register_started(record)
            self._progress.finished(message.partition, message.offset)
            return
        where = f"{SESSIONS_TOPIC}/{message.partition}@{message.offset}"
        if self._acks_ahead.acknowledged_later(message.partition, message.offset,
                                               record.client_id):
            log.info("session %s at %s: its client acknowledged the results before this "
                     "start; no job", record.client_id, where)
            self._count("sessions_acked_before_start")
            self._progress.finished(message.partition, message.offset)
            return
        if self._fold is not None:
            try:
                self._until_broker_answers(lambda: self._fold.on_ended(record))
            except (SessionKeyCollisionError, SessionNotRecoverableError) as error:
                log.error("session %s: %s; given up, its client gets no results",
                          record.client_id, error)
                self._count("sessions_given_up")
                self._progress.finished(message.partition, message.offset)
                return
        log.info("session %s picked up at %s: end offsets %s", record.client_id, where,
                 record.end_offsets)
        self._count("sessions_picked_up")
        self._workers.submit(message.partition, message.offset, record)

    def _register_started(self, record: SessionStarted) -> None:
        """The streaming fold reads a session's flights once its airports are registered."""
        if self._fold is None:
            return
        try:
            self._until_broker_answers(lambda: self._fold.on_started(record))
        except (SessionKeyCollisionError, SessionNotRecoverableError) as error:
            log.error("session %s: %s; its rows are not folded", record.client_id, error)

    def absorb_finished(self, store, wait_s: float) -> None:
        """Mark what the workers finished (waiting up to `wait_s` for a first one), commit."""
        try:
            finished = [self._workers.finished.get(timeout=wait_s) if wait_s > 0
                        else self._workers.finished.get_nowait()]
        except queue.Empty:
            finished = []
        while True:
            try:
                finished.append(self._workers.finished.get_nowait())
            except queue.Empty:
                break
        for item in finished:
            self._progress.finished(item.partition, item.offset)
        commit_progress(store, self._progress, self._committed, "")

    # -- deleting the topics of acknowledged sessions ----------------------------------------

    def clean_up(self, admin, store) -> None:
        """Delete the topics of every acknowledged session that is due (rules:
        spark/service/session_cleanup.py), then commit the cleanup cursor (`store` None: not
        kept)."""
        if self._cleanup is None:
            return
        running = self._workers.running_clients()
        for cid in self._cleanup.due(self._clock(), running, self._committed):
            if self.stop_requested.is_set():
                break
            try:
                deleted = self._delete_session_topics(admin, cid)
            except KaskaError as error:
                pause_s = self._cleanup.failed(cid, self._clock())
                log.warning("session %s: deleting its topics failed (%s: %s); retrying in "
                            "%.0f s", cid, type(error).__name__, error, pause_s)
                continue
            if self._fold is not None:
                self._fold.on_cleaned(cid)
            for partition, offset in self._cleanup.deleted(cid):
                self._cleanup_progress.finished(partition, offset)
            self._count("sessions_cleaned")
            log.info("session %s: acknowledged, %d topic(s) deleted (%s)", cid, len(deleted),
                     ", ".join(deleted) or "all were gone already")
        if store is not None:
            commit_progress(store, self._cleanup_progress, self._cleanup_committed, " (cleanup)")

    def _delete_session_topics(self, admin, cid: str) -> list[str]:
        """The topics that existed and are deleted now; one that is gone already is fine."""
        deleted = []
        for topic in session_topics(cid):
            try:
                admin.delete_topic(topic)
            except UnknownTopicOrPartitionError:
                continue
            deleted.append(topic)
            self._count("session_topics_deleted")
        return deleted

    # -- workers -----------------------------------------------------------------------------

    def start_workers(self) -> None:
        self._workers.start()

    def stop_workers(self) -> None:
        """Cancel the running jobs when stopping; give the workers a moment to end."""
        self._workers.stop()

    def has_seen_sessions(self) -> bool:
        """Whether a session started, ended or ran a job since this service started: the
        idle warm-up (driver.py) then yields the cores to the sessions for good."""
        with self._counts_lock:
            seen = self.counts["sessions_started"] + self.counts["sessions_picked_up"]
        return seen > 0 or self.metrics.snapshot()[0] > 0

    def _count(self, name: str) -> None:
        with self._counts_lock:
            self.counts[name] += 1

    # -- stopping ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop reading sessions; `run` then cancels the running jobs and returns."""
        self.stop_requested.set()


def validate_acked(record: ResultsAcked) -> None:
    """MalformedSessionRecordError unless the client id makes valid topic names."""
    for topic in session_topics(record.client_id):
        try:
            validate_topic_name(topic)
        except InvalidTopicError as error:
            raise MalformedSessionRecordError(
                f"client_id {record.client_id[:60]!r}: {error}") from error
