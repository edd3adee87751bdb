"""The query service: one long-running Spark application that answers every ended session.

    python -m spark.service --brokers H:P[,H:P] --master local[2] [--checkpoint-dir DIR]
        [--heartbeat-targets H:P[,...]] [--sessions-concurrent-max N]
        [--finished-session-retention-s S | --keep-finished-sessions] ...

Follows the `sessions` topic. For each SessionEnded it runs `spark.session_job` (Q1-Q4 over
exactly the session's offset ranges, results and QueryDone records to `results.<cid>`) in a
worker thread with its own FAIR scheduler pool; at most `--sessions-concurrent-max` jobs run
at once, and the loop stops reading `sessions` while `--sessions-pending-max` are picked up
but unfinished. Other records (SessionStarted, unknown or malformed ones) are counted and
skipped; nothing on the topic can crash the service.

Crash safety. Progress over `sessions` is the committed offset of group `query-service` on the
broker (the default) or, with `--checkpoint-dir`, a local `CheckpointStore`. The broker is the
default because the service then keeps no state of its own: a container restarted anywhere,
without a volume, resumes where the last one stopped, and the offsets replicate with the data.
A position is committed only when every session before it is finished, and a session is
finished only once its four QueryDone records are acknowledged (`session_progress`). A service
killed at any moment redoes the unfinished sessions; their result writes are idempotent
(`result_writer`: deterministic producer ids, sequence numbers and row order), so the broker
drops what the killed run had already written and every result row is stored once.

Finished sessions' topics. A client that saved its results appends ResultsAcked; the service
then deletes the session's three topics, after `--finished-session-retention-s` (default 0: at
once; negative, or `--keep-finished-sessions`: never), never while a job for that client runs
and never before its SessionEnded is committed (rules: spark/session_cleanup.py). The acks'
places are tracked by a second cursor, group `query-service-cleanup` (or store
`sessions-cleanup` with `--checkpoint-dir`), committed once the topics are gone, so a service
killed after an ack deletes them after its restart. Reading starts at the lower cursor; records
below the job cursor start no job.

A failed job (broker unreachable past the read deadline, executor lost...) is retried with
backoff up to `--session-attempts-max` times, then logged as given up and skipped.

SIGTERM/SIGINT: stop reading sessions, cancel running jobs, stop Spark, exit 0 within a few
seconds; unfinished sessions are not committed and are redone by the next start.

In local mode Spark does not retry failed tasks unless the master says so (`local[N,F]`); the
`kaska` reader retries on its own (`--read-retry-deadline-s`) and the job-level retry covers
the rest.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from common.checkpoint import CheckpointError, CheckpointStore
from common.cluster_secret import ClusterSecretError
from common.heartbeat import (
    HeartbeatConfigError,
    HeartbeatSender,
    heartbeat_secret,
    parse_targets,
)
from common.kaska import Admin, Consumer, Message
from common.kaska.errors import (
    InvalidTopicError,
    KaskaError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from common.kaska.retry import RetryPolicy
from common.kaska.topic_name import validate_topic_name
from common.metrics_http import MetricsBindError, MetricsEndpoint, metrics_listen_arg
from common.session_records import (
    SESSIONS_TOPIC,
    MalformedSessionRecordError,
    ResultsAcked,
    SessionEnded,
    SessionStarted,
    decode,
    session_topics,
)
from spark.kaska_source import register
from spark.metrics import JobMetrics, query_service_registry
from spark.queries import SESSION_CONFIG
from spark.result_writer import RESULT_ROWS_PER_SLICE_DEFAULT, ResultWriteInterruptedError
from spark.session_cleanup import SessionCleanup, retention_due_s
from spark.session_job import JobSettings, run_session_job, validate_session
from spark.session_progress import SessionProgress
from spark.warm_up import SAMPLE_ROWS_DEFAULT as WARM_UP_ROWS_DEFAULT
from spark.warm_up import WarmUpError, warm_up

log = logging.getLogger("spark.service")

SERVICE_NAME = "query-service"
CONSUMER_GROUP = "query-service"
CLEANUP_GROUP = "query-service-cleanup"
CLEANUP_STORE_NAME = "sessions-cleanup"
# Deletions run in the main loop: a broker that does not answer costs seconds, not minutes.
CLEANUP_ADMIN_OPTIONS = {"request_timeout_s": 5.0, "retry": RetryPolicy(retries_max=3)}
REPO = Path(__file__).resolve().parents[1]
POLL_TIMEOUT_S = 0.5
BROKER_PAUSE_S_MAX = 5.0
SESSION_RETRY_PAUSE_S_MAX = 30.0
SHUTDOWN_GRACE_S = 3.0
# A job failure the next attempt may fix: Spark's (task/stage/executor failures surface as
# these) and the broker's.
JOB_ERRORS = (PySparkException, Py4JError, KaskaError)


@dataclass(frozen=True)
class ServiceSettings:
    brokers: str
    master: str
    token: str | None = None
    checkpoint_dir: Path | None = None
    heartbeat_targets: tuple[tuple[str, int], ...] = ()
    heartbeat_interval_s: float = 1.0
    secret_file: Path | None = None  # the cluster secret heartbeats are signed with
    sessions_concurrent_max: int = 2
    sessions_pending_max: int = 8
    session_attempts_max: int = 5
    session_retry_pause_s: float = 2.0  # doubled per failed attempt, up to 30 s
    shuffle_partitions: int = 4
    driver_host: str = "127.0.0.1"
    driver_memory: str = "2g"
    rows_per_slice: int = RESULT_ROWS_PER_SLICE_DEFAULT
    result_slice_pause_s: float = 0.0
    read_retry_deadline_s: float = 60.0
    metrics_listen: tuple[str, int] | None = None  # Prometheus /metrics; None: off
    warm_up_rows: int = WARM_UP_ROWS_DEFAULT  # 0: serve cold
    # The driver's Spark UI: None = Spark's default port (4040) on a cluster and off in local
    # mode (tests start many drivers); 0 = off; a port = on, also in local mode.
    ui_port: int | None = None
    # Seconds an acknowledged session's topics are kept; negative: kept for ever.
    finished_session_retention_s: float = 0.0

    @property
    def deletes_finished_sessions(self) -> bool:
        return self.finished_session_retention_s >= 0


@dataclass(frozen=True)
class Finished:
    """A worker's report to the main loop: the `sessions` record at this place is finished
    (done or given up; an interrupted one is not reported)."""

    partition: int
    offset: int


class ServiceStopping(Exception):
    """A stop was requested while the service waited for the broker."""


# --- progress stores --------------------------------------------------------------------------


class BrokerProgressStore:
    """Committed offsets of the consumer's group (`query-service`, or `query-service-cleanup`)
    on the broker (the `__offsets` topic)."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def load(self, partition: int) -> int | None:
        return self._consumer.committed(SESSIONS_TOPIC, partition)

    def save(self, partition: int, offset: int) -> None:
        self._consumer.commit(SESSIONS_TOPIC, offset, partition)


class FileProgressStore:
    """`{"<partition>": offset}` in a CheckpointStore (JSON payload, atomic versioned saves)."""

    def __init__(self, directory: Path, name: str = "sessions-progress") -> None:
        self._store = CheckpointStore(directory, name=name)
        self._offsets: dict[str, int] = self._store.load_json() or {}

    def load(self, partition: int) -> int | None:
        return self._offsets.get(str(partition))

    def save(self, partition: int, offset: int) -> None:
        self._offsets[str(partition)] = offset
        self._store.save_json(self._offsets)


# --- the service ------------------------------------------------------------------------------


class QueryService:
    def __init__(self, settings: ServiceSettings, spark,
                 stop_requested: threading.Event | None = None,
                 clock=time.monotonic, wall_clock=time.time) -> None:
        self.settings = settings
        self.spark = spark
        self.stop_requested = stop_requested or threading.Event()
        self.counts = {"sessions_done": 0, "sessions_given_up": 0, "records_skipped": 0,
                       "records_malformed": 0, "sessions_started": 0, "sessions_picked_up": 0,
                       "sessions_acked": 0, "sessions_cleaned": 0, "session_topics_deleted": 0}
        self.metrics = JobMetrics()  # read by spark.metrics at scrape time
        self._clock = clock
        self._wall_clock = wall_clock
        self._progress = SessionProgress()
        self._committed: dict[int, int] = {}
        self._jobs_from: dict[int, int] = {}  # partition -> first offset that may start a job
        # Topic deletion of acknowledged sessions (None: kept) and its own cursor.
        self._cleanup = SessionCleanup(settings.finished_session_retention_s) \
            if settings.deletes_finished_sessions else None
        self._cleanup_progress = SessionProgress()
        self._cleanup_from: dict[int, int] = {}
        self._cleanup_committed: dict[int, int] = {}
        self._finished: queue.Queue[Finished] = queue.Queue()
        self._jobs: queue.Queue[tuple[int, int, SessionEnded] | None] = queue.Queue()
        self._running_clients: set[str] = set()
        self._running_lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._job_settings = JobSettings(
            brokers=settings.brokers, token=settings.token,
            rows_per_slice=settings.rows_per_slice,
            slice_pause_s=settings.result_slice_pause_s,
            retry_deadline_s=settings.read_retry_deadline_s)

    # -- main loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until `request_stop`; unfinished sessions stay uncommitted."""
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
                full = self._progress.pending() >= self.settings.sessions_pending_max or (
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

    def _progress_store(self, consumer: Consumer, file_name: str = "sessions-progress"):
        if self.settings.checkpoint_dir is not None:
            return FileProgressStore(self.settings.checkpoint_dir, file_name)
        return BrokerProgressStore(consumer)

    def _assign(self, consumer: Consumer, store, cleanup_store) -> None:
        """Start every partition of `sessions` at its checkpoint (or the log start: a session
        that ended before the service's first start must not be missed); with topic deletion
        on, at the cleanup cursor when that one is lower (module doc)."""
        partitions = self._until_broker_answers(lambda: self._sessions_partitions())
        for partition in range(partitions):
            committed = self._until_broker_answers(lambda p=partition: store.load(p))
            position = committed if committed is not None else self._until_broker_answers(
                lambda p=partition: consumer.start_offset(SESSIONS_TOPIC, p))
            cleanup_position = None
            if cleanup_store is not None:
                cleanup_position = self._until_broker_answers(
                    lambda p=partition: cleanup_store.load(p))
            self.assign_partition(partition, position, cleanup_position)
            start = min(position, self._cleanup_from.get(partition, position))
            consumer.seek(SESSIONS_TOPIC, start, partition)
            log.info("following %s/%d from offset %d (%s; cleanup cursor at %s)",
                     SESSIONS_TOPIC, partition, start,
                     "checkpoint" if committed is not None else "log start, no checkpoint",
                     self._cleanup_from.get(partition, "-"))

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
        """`call()`, retried with backoff while the broker is unreachable (until stopped)."""
        pause_s = 0.2
        while True:
            try:
                return call()
            except KaskaError as error:
                if not error.retriable:
                    raise
                log.warning("broker not answering (%s: %s); retrying in %.1f s",
                            type(error).__name__, error, pause_s)
                if self.stop_requested.wait(pause_s):
                    raise ServiceStopping() from error
                pause_s = min(BROKER_PAUSE_S_MAX, pause_s * 2)

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
                _validate_acked(record)
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
            self._progress.finished(message.partition, message.offset)
            return
        where = f"{SESSIONS_TOPIC}/{message.partition}@{message.offset}"
        log.info("session %s picked up at %s: end offsets %s", record.client_id, where,
                 record.end_offsets)
        self._count("sessions_picked_up")
        self._jobs.put((message.partition, message.offset, record))

    def absorb_finished(self, store, wait_s: float) -> None:
        """Mark what the workers finished (waiting up to `wait_s` for a first one), commit."""
        try:
            finished = [self._finished.get(timeout=wait_s) if wait_s > 0
                        else self._finished.get_nowait()]
        except queue.Empty:
            finished = []
        while True:
            try:
                finished.append(self._finished.get_nowait())
            except queue.Empty:
                break
        for item in finished:
            self._progress.finished(item.partition, item.offset)
        _commit(store, self._progress, self._committed, "")

    # -- deleting the topics of acknowledged sessions ----------------------------------------

    def clean_up(self, admin, store) -> None:
        """Delete the topics of every acknowledged session that is due (rules:
        spark/session_cleanup.py), then commit the cleanup cursor (`store` None: not kept)."""
        if self._cleanup is None:
            return
        with self._running_lock:
            running = set(self._running_clients)
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
            for partition, offset in self._cleanup.deleted(cid):
                self._cleanup_progress.finished(partition, offset)
            self._count("sessions_cleaned")
            log.info("session %s: acknowledged, %d topic(s) deleted (%s)", cid, len(deleted),
                     ", ".join(deleted) or "all were gone already")
        if store is not None:
            _commit(store, self._cleanup_progress, self._cleanup_committed, " (cleanup)")

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
        # Daemon threads: a stop never waits for a job stuck in a broker call.
        for index in range(self.settings.sessions_concurrent_max):
            worker = threading.Thread(target=self._work, args=(f"sessions-{index}",),
                                      name=f"session-worker-{index}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def stop_workers(self) -> None:
        if self.stop_requested.is_set():
            # Running jobs fail fast instead of finishing; their sessions stay uncommitted.
            stop_spark_quietly(self.spark.sparkContext.cancelAllJobs, "cancelling jobs")
        for _ in self._workers:
            self._jobs.put(None)
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        busy = sum(worker.is_alive() for worker in self._workers)
        if busy:
            log.info("%d session job(s) still running at shutdown: left uncommitted, redone by "
                     "the next start", busy)

    def _work(self, pool: str) -> None:
        """One worker: its jobs go to its own FAIR pool, so concurrent sessions share the
        executors evenly (a pool per worker rather than per session: Spark never drops a pool,
        and a long-running service would collect one per session ever seen)."""
        while True:
            job = self._jobs.get()
            if job is None or self.stop_requested.is_set():
                return
            partition, offset, ended = job
            if self._run_with_retries(ended, pool) is not None:
                self._finished.put(Finished(partition, offset))

    def _run_with_retries(self, ended: SessionEnded, pool: str) -> bool | None:
        """True when done, False when given up, None when interrupted by a stop."""
        cid = ended.client_id
        with self._running_lock:
            if cid in self._running_clients:
                log.info("session %s: a job for it is already running; this repeat of its "
                         "SessionEnded is covered by it", cid)
                return True
            self._running_clients.add(cid)
        try:
            return self._attempts(ended, pool)
        finally:
            with self._running_lock:
                self._running_clients.discard(cid)

    def _attempts(self, ended: SessionEnded, pool: str) -> bool | None:
        cid = ended.client_id
        for attempt in range(1, self.settings.session_attempts_max + 1):
            started = time.monotonic()
            try:
                report = self.metrics.timed_job(run_session_job, self.spark, ended,
                                                self._job_settings, pool, self.stop_requested)
            except ResultWriteInterruptedError as error:
                log.info("session %s: interrupted (%s); redone on restart", cid, error)
                return None
            except JOB_ERRORS as error:
                if self.stop_requested.is_set():
                    log.info("session %s: stopped mid-job; redone on restart", cid)
                    return None
                pause_s = min(SESSION_RETRY_PAUSE_S_MAX,
                              self.settings.session_retry_pause_s * 2 ** (attempt - 1))
                log.warning("session %s: attempt %d of %d failed after %.1f s (%s: %s)", cid,
                            attempt, self.settings.session_attempts_max,
                            time.monotonic() - started, type(error).__name__,
                            _first_line(error))
                if attempt < self.settings.session_attempts_max and \
                        self.stop_requested.wait(pause_s):
                    return None
                continue
            self._count("sessions_done")
            log.info("session %s done in %.2f s: %d rows, result rows %s", cid,
                     time.monotonic() - started, report.rows, report.query_rows)
            return True
        self._count("sessions_given_up")
        log.error("session %s: given up after %d attempts; its client gets no results", cid,
                  self.settings.session_attempts_max)
        return False

    def _count(self, name: str) -> None:
        with self._running_lock:
            self.counts[name] += 1

    # -- stopping ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop reading sessions; `run` then cancels the running jobs and returns."""
        self.stop_requested.set()


def _commit(store, progress: SessionProgress, committed: dict[int, int], what: str) -> None:
    """Save `progress`'s commit position of every partition that moved; `committed` holds the
    positions saved."""
    for partition in progress.partitions():
        position = progress.commit_position(partition)
        if position == committed.get(partition):
            continue
        try:
            store.save(partition, position)
        except (KaskaError, CheckpointError, OSError) as error:
            log.warning("committing %s/%d at %d%s failed (%s); will retry", SESSIONS_TOPIC,
                        partition, position, what, error)
            return
        committed[partition] = position
        log.info("committed %s/%d at offset %d%s", SESSIONS_TOPIC, partition, position, what)


def _validate_acked(record: ResultsAcked) -> None:
    """MalformedSessionRecordError unless the client id makes valid topic names."""
    for topic in session_topics(record.client_id):
        try:
            validate_topic_name(topic)
        except InvalidTopicError as error:
            raise MalformedSessionRecordError(
                f"client_id {record.client_id[:60]!r}: {error}") from error


def warm_up_quietly(spark, sample_rows: int) -> None:
    """Pay the first job's cost now (spark/warm_up.py); a failure only leaves Spark cold."""
    if sample_rows <= 0:
        return
    try:
        seconds = warm_up(spark, sample_rows)
    except (*JOB_ERRORS, WarmUpError) as error:
        log.warning("warm-up failed, serving cold: %s: %s", type(error).__name__,
                    _first_line(error))
        return
    log.info("warmed up in %.1f s (Q1-Q4 over %d sample rows)", seconds, sample_rows)


def stop_spark_quietly(call, what: str) -> None:
    """`call()` during shutdown, when the JVM may already be gone: a Ctrl-C or a group-wide
    SIGTERM reaches the JVM too, and it stops its SparkContext on its own."""
    try:
        call()
    except (Py4JError, PySparkException, ConnectionError) as error:
        log.info("%s: the JVM is already stopping (%s)", what, _first_line(error))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


# --- Spark ------------------------------------------------------------------------------------


def spark_session(settings: ServiceSettings):
    """The service's SparkSession: FAIR scheduling between session jobs, the `kaska` source."""
    from pyspark.sql import SparkSession

    # Python workers import `spark.kaska_source` and `common`: make the tree importable for
    # them wherever the JVM starts them (an installed package works as well).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys(filter(None, [str(REPO), *os.environ.get("PYTHONPATH", "").split(
            os.pathsep)])))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if settings.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", settings.driver_host)
    builder = (SparkSession.builder.master(settings.master).appName(SERVICE_NAME)
               .config("spark.scheduler.mode", "FAIR")
               .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", settings.driver_memory)
               .config("spark.driver.host", settings.driver_host))
    for key, value in SESSION_CONFIG.items():
        builder = builder.config(key, value)
    if settings.master.startswith("local"):
        builder = builder.config("spark.driver.bindAddress", settings.driver_host)
    builder = _ui_config(builder, settings)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def _ui_config(builder, settings: ServiceSettings):
    """The driver UI per `ServiceSettings.ui_port` (in local mode it binds to SPARK_LOCAL_IP,
    the driver host, so 127.0.0.1 keeps it off the network)."""
    if settings.ui_port == 0 or (settings.ui_port is None
                                 and settings.master.startswith("local")):
        return builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.enabled", "true")
    if settings.ui_port is not None:
        builder = builder.config("spark.ui.port", str(settings.ui_port))
    return builder


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> ServiceSettings:
    parser = argparse.ArgumentParser(prog="python -m spark.service",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", required=True, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--master", default="local[2]", help="local[N], local[N,F], spark://...")
    parser.add_argument("--token", default=os.environ.get("KASKA_TOKEN"))
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="keep progress in a local checkpoint store instead of the broker")
    parser.add_argument("--heartbeat-targets", type=parse_targets, default=(),
                        help="health checkers, HOST:PORT[,...]")
    parser.add_argument("--heartbeat-interval-s", type=float, default=1.0)
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="file holding the cluster secret the heartbeats are signed with "
                             "(default: $FLIGHTS_CLUSTER_SECRET)")
    parser.add_argument("--sessions-concurrent-max", type=int, default=2)
    parser.add_argument("--sessions-pending-max", type=int, default=8)
    parser.add_argument("--session-attempts-max", type=int, default=5)
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--driver-host", default="127.0.0.1",
                        help="address Spark executors reach the driver at")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--result-rows-per-slice", type=int,
                        default=RESULT_ROWS_PER_SLICE_DEFAULT)
    parser.add_argument("--result-slice-pause-s", type=float, default=0.0,
                        help="pause after each result slice (fault-injection tests only)")
    parser.add_argument("--read-retry-deadline-s", type=float, default=60.0)
    parser.add_argument("--metrics-listen", type=metrics_listen_arg, default=None,
                        help="HOST:PORT to serve Prometheus /metrics on (absent: off)")
    parser.add_argument("--finished-session-retention-s", type=float, default=0.0,
                        help="seconds a session's topics are kept after its client acknowledged "
                             "the results (default 0: deleted at once; negative: kept)")
    parser.add_argument("--keep-finished-sessions", action="store_true",
                        help="never delete a finished session's topics")
    parser.add_argument("--ui-port", type=int, default=None,
                        help="the driver's Spark UI port (0: off; default: 4040 on a cluster, "
                             "off in local mode)")
    parser.add_argument("--warm-up-rows", type=int, default=WARM_UP_ROWS_DEFAULT,
                        help="run Q1-Q4 once over this many sample rows before serving "
                             "(spark/warm_up.py; 0: serve cold)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("sessions_concurrent_max", "sessions_pending_max", "session_attempts_max",
                 "shuffle_partitions", "result_rows_per_slice"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.ui_port is not None and not 0 <= args.ui_port <= 65535:
        parser.error(f"--ui-port must lie in [0, 65535], got {args.ui_port}")
    if not math.isfinite(args.finished_session_retention_s):
        parser.error("--finished-session-retention-s must be a finite number")
    retention_s = -1.0 if args.keep_finished_sessions else args.finished_session_retention_s
    return ServiceSettings(
        brokers=args.brokers, master=args.master, token=args.token,
        checkpoint_dir=args.checkpoint_dir, heartbeat_targets=tuple(args.heartbeat_targets),
        heartbeat_interval_s=args.heartbeat_interval_s, secret_file=args.secret_file,
        sessions_concurrent_max=args.sessions_concurrent_max,
        sessions_pending_max=max(args.sessions_pending_max, args.sessions_concurrent_max),
        session_attempts_max=args.session_attempts_max,
        shuffle_partitions=args.shuffle_partitions, driver_host=args.driver_host,
        driver_memory=args.driver_memory, rows_per_slice=args.result_rows_per_slice,
        result_slice_pause_s=args.result_slice_pause_s,
        read_retry_deadline_s=args.read_retry_deadline_s, metrics_listen=args.metrics_listen,
        finished_session_retention_s=retention_s, ui_port=args.ui_port,
        warm_up_rows=max(0, args.warm_up_rows))


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    stop_requested = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("signal %d: stopping", signum)
        stop_requested.set()

    # Before Spark starts (it takes seconds): a SIGTERM meanwhile still ends in a clean exit.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        secret = heartbeat_secret(settings.heartbeat_targets, settings.secret_file)
    except (ClusterSecretError, HeartbeatConfigError) as error:
        log.error("%s: %s", type(error).__name__, error)
        return 2
    heartbeat = None
    if settings.heartbeat_targets:
        heartbeat = HeartbeatSender(SERVICE_NAME, targets=settings.heartbeat_targets,
                                    interval_s=settings.heartbeat_interval_s,
                                    secret=secret).start()
    spark = spark_session(settings)
    service = QueryService(settings, spark, stop_requested)
    try:
        metrics = MetricsEndpoint.start_optional(settings.metrics_listen,
                                                 lambda: query_service_registry(service))
    except MetricsBindError as error:
        log.error("%s: %s", type(error).__name__, error)
        stop_spark_quietly(spark.stop, "stopping Spark")
        if heartbeat is not None:
            heartbeat.stop()
        return 2
    warm_up_quietly(spark, settings.warm_up_rows)
    log.info("query service up: brokers %s, master %s, %d concurrent sessions, finished "
             "sessions' topics %s", settings.brokers, settings.master,
             settings.sessions_concurrent_max,
             f"deleted {settings.finished_session_retention_s:g} s after the ack"
             if settings.deletes_finished_sessions else "kept")
    try:
        service.run()
    finally:
        if metrics is not None:
            metrics.stop()
        stop_spark_quietly(spark.stop, "stopping Spark")
        if heartbeat is not None:
            heartbeat.stop()
        log.info("query service stopped: %s", service.counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
