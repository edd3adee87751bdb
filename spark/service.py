"""The query service: one long-running Spark application that answers every ended session.

    python -m spark.service --brokers H:P[,H:P] --master local[2] [--checkpoint-dir DIR]
        [--heartbeat-targets H:P[,...]] [--sessions-concurrent-max N] ...

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
from common.heartbeat import HeartbeatSender, parse_targets
from common.kaska import Admin, Consumer, Message
from common.kaska.errors import KaskaError, OffsetOutOfRangeError, TopicAlreadyExistsError
from common.metrics_http import MetricsBindError, MetricsEndpoint, metrics_listen_arg
from common.session_records import (
    SESSIONS_TOPIC,
    MalformedSessionRecordError,
    SessionEnded,
    SessionStarted,
    decode,
)
from spark.kaska_source import register
from spark.metrics import JobMetrics, query_service_registry
from spark.result_writer import RESULT_ROWS_PER_SLICE_DEFAULT, ResultWriteInterruptedError
from spark.session_job import JobSettings, run_session_job, validate_session
from spark.session_progress import SessionProgress

log = logging.getLogger("spark.service")

SERVICE_NAME = "query-service"
CONSUMER_GROUP = "query-service"
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
    """Committed offsets of group `query-service` on the broker (the `__offsets` topic)."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def load(self, partition: int) -> int | None:
        return self._consumer.committed(SESSIONS_TOPIC, partition)

    def save(self, partition: int, offset: int) -> None:
        self._consumer.commit(SESSIONS_TOPIC, offset, partition)


class FileProgressStore:
    """`{"<partition>": offset}` in a CheckpointStore (JSON payload, atomic versioned saves)."""

    def __init__(self, directory: Path) -> None:
        self._store = CheckpointStore(directory, name="sessions-progress")
        self._offsets: dict[str, int] = self._store.load_json() or {}

    def load(self, partition: int) -> int | None:
        return self._offsets.get(str(partition))

    def save(self, partition: int, offset: int) -> None:
        self._offsets[str(partition)] = offset
        self._store.save_json(self._offsets)


# --- the service ------------------------------------------------------------------------------


class QueryService:
    def __init__(self, settings: ServiceSettings, spark,
                 stop_requested: threading.Event | None = None) -> None:
        self.settings = settings
        self.spark = spark
        self.stop_requested = stop_requested or threading.Event()
        self.counts = {"sessions_done": 0, "sessions_given_up": 0, "records_skipped": 0,
                       "records_malformed": 0, "sessions_started": 0, "sessions_picked_up": 0}
        self.metrics = JobMetrics()  # read by spark.metrics at scrape time
        self._progress = SessionProgress()
        self._committed: dict[int, int] = {}
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
        try:
            store = self._progress_store(consumer)
            self.start_workers()
            self._assign(consumer, store)
            while not self.stop_requested.is_set():
                full = self._progress.pending() >= self.settings.sessions_pending_max
                self.absorb_finished(store, wait_s=POLL_TIMEOUT_S if full else 0.0)
                if not full:
                    self._poll_once(consumer)
            self.absorb_finished(store, wait_s=0.0)
        except ServiceStopping:
            log.info("stopped while waiting for the broker")
        finally:
            self.stop_workers()
            consumer.close()

    def _progress_store(self, consumer: Consumer):
        if self.settings.checkpoint_dir is not None:
            return FileProgressStore(self.settings.checkpoint_dir)
        return BrokerProgressStore(consumer)

    def _assign(self, consumer: Consumer, store) -> None:
        """Start every partition of `sessions` at its checkpoint (or the log start: a session
        that ended before the service's first start must not be missed)."""
        partitions = self._until_broker_answers(lambda: self._sessions_partitions())
        for partition in range(partitions):
            committed = self._until_broker_answers(lambda p=partition: store.load(p))
            position = committed if committed is not None else self._until_broker_answers(
                lambda p=partition: consumer.start_offset(SESSIONS_TOPIC, p))
            consumer.seek(SESSIONS_TOPIC, position, partition)
            self.assign_partition(partition, position)
            log.info("following %s/%d from offset %d (%s)", SESSIONS_TOPIC, partition, position,
                     "checkpoint" if committed is not None else "log start, no checkpoint")

    def assign_partition(self, partition: int, position: int) -> None:
        """Records of `partition` are read from `position`, which is already committed."""
        self._progress.start(partition, position)
        self._committed[partition] = position

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

    def handle(self, message: Message) -> None:
        """Take the next `sessions` record: a SessionEnded goes to a worker, anything else
        is finished at once (malformed ones counted and logged)."""
        self._progress.picked(message.partition, message.offset)
        where = f"{SESSIONS_TOPIC}/{message.partition}@{message.offset}"
        try:
            record = decode(message.value)
            if isinstance(record, SessionEnded):
                validate_session(record)
        except (MalformedSessionRecordError, RecursionError) as error:
            # RecursionError: JSON nested deeper than the parser's stack; just as malformed.
            self._count("records_malformed")
            log.warning("skipping malformed record at %s: %s (%d malformed so far)", where,
                        error, self.counts["records_malformed"])
            self._progress.finished(message.partition, message.offset)
            return
        if not isinstance(record, SessionEnded):
            if isinstance(record, SessionStarted):
                self._count("sessions_started")
            self._count("records_skipped")
            self._progress.finished(message.partition, message.offset)
            return
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
        self._commit(store)

    def _commit(self, store) -> None:
        for partition in self._progress.partitions():
            position = self._progress.commit_position(partition)
            if position == self._committed.get(partition):
                continue
            try:
                store.save(partition, position)
            except (KaskaError, CheckpointError, OSError) as error:
                log.warning("committing %s/%d at %d failed (%s); will retry", SESSIONS_TOPIC,
                            partition, position, error)
                return
            self._committed[partition] = position
            log.info("committed %s/%d at offset %d", SESSIONS_TOPIC, partition, position)

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
    if settings.master.startswith("local"):
        builder = builder.config("spark.driver.bindAddress", settings.driver_host) \
            .config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


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
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("sessions_concurrent_max", "sessions_pending_max", "session_attempts_max",
                 "shuffle_partitions", "result_rows_per_slice"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return ServiceSettings(
        brokers=args.brokers, master=args.master, token=args.token,
        checkpoint_dir=args.checkpoint_dir, heartbeat_targets=tuple(args.heartbeat_targets),
        heartbeat_interval_s=args.heartbeat_interval_s,
        sessions_concurrent_max=args.sessions_concurrent_max,
        sessions_pending_max=max(args.sessions_pending_max, args.sessions_concurrent_max),
        session_attempts_max=args.session_attempts_max,
        shuffle_partitions=args.shuffle_partitions, driver_host=args.driver_host,
        driver_memory=args.driver_memory, rows_per_slice=args.result_rows_per_slice,
        result_slice_pause_s=args.result_slice_pause_s,
        read_retry_deadline_s=args.read_retry_deadline_s, metrics_listen=args.metrics_listen)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    stop_requested = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("signal %d: stopping", signum)
        stop_requested.set()

    # Before Spark starts (it takes seconds): a SIGTERM meanwhile still ends in a clean exit.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    heartbeat = None
    if settings.heartbeat_targets:
        heartbeat = HeartbeatSender(SERVICE_NAME, targets=settings.heartbeat_targets,
                                    interval_s=settings.heartbeat_interval_s).start()
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
    log.info("query service up: brokers %s, master %s, %d concurrent sessions",
             settings.brokers, settings.master, settings.sessions_concurrent_max)
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
