"""The query service's session workers: each runs one session's job at a time, with retries.

Owns: the job queue the main loop fills (`submit`), the worker threads, the retry of a failed
job with back-off (`--session-attempts-max` attempts, pauses from `session_retry_pause_s`
doubling up to `SESSION_RETRY_PAUSE_S_MAX`; a malformed rows payload, which every attempt
would meet again, is given up at once and counted), the set of clients whose job runs now, and
the `Finished` reports the main loop absorbs.

Invariants: at most `sessions_concurrent_max` jobs run at once; at most one job per client
runs at a time (a repeated SessionEnded for a running client is covered by the running job);
a session is reported `Finished` when it is done or given up, never when a stop interrupted
it (it stays uncommitted and is redone by the next start).

Threads: `sessions_concurrent_max` daemon threads (a stop never waits for a job stuck in a
broker call), each with its own FAIR pool; `submit`, `running_clients`, `start` and `stop`
are called from the main loop; `finished` is a thread-safe queue read by the main loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.backoff import Backoff
from common.flights.arrow_rows import MalformedRowsPayloadError, RowsPayloadTooLargeError
from common.flights.session_records import SessionEnded
from spark.folding.service_fold import FoldInterruptedError, FoldNotCaughtUpError
from spark.service.driver import JOB_ERRORS, first_line, stop_spark_quietly
from spark.service.metrics import JobMetrics
from spark.service.result_writer import ResultWriteInterruptedError
from spark.service.service_settings import ServiceSettings
from spark.service.session_job import JobSettings, run_session_job

# The service's one logger, as before the split: its log lines read the same.
log = logging.getLogger("spark.service")
SESSION_RETRY_PAUSE_S_MAX = 30.0
SHUTDOWN_GRACE_S = 3.0


@dataclass(frozen=True)
class Finished:
    """A worker's report to the main loop: the `sessions` record at this place is finished
    (done or given up; an interrupted one is not reported)."""

    partition: int
    offset: int


# Raised in a Spark Python worker (spark/source/kaska_source.py, common/flights/arrow_rows.py) and
# carried to the driver inside a PythonException's text: a rows payload that does not decode,
# or decodes past its bound.
MALFORMED_PAYLOAD_ERRORS = (MalformedRowsPayloadError.__name__,
                            RowsPayloadTooLargeError.__name__)


def is_malformed_payload(error: BaseException) -> bool:
    text = str(error)
    return any(f"{name}:" in text for name in MALFORMED_PAYLOAD_ERRORS)


class SessionWorkers:
    def __init__(self, settings: ServiceSettings, spark, stop_requested: threading.Event,
                 metrics: JobMetrics, count: Callable[[str], None],
                 job: Callable[[SessionEnded, str], object] | None = None) -> None:
        self.settings = settings
        self.spark = spark
        self.stop_requested = stop_requested
        self.metrics = metrics
        self.finished: queue.Queue[Finished] = queue.Queue()
        self._count = count  # the service's counters (thread-safe)
        self._jobs: queue.Queue[tuple[int, int, SessionEnded] | None] = queue.Queue()
        self._running_clients: set[str] = set()
        self._running_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._retry_backoff = Backoff(settings.session_retry_pause_s, SESSION_RETRY_PAUSE_S_MAX)
        self._job_settings = JobSettings(
            brokers=settings.brokers, token=settings.token,
            rows_per_slice=settings.rows_per_slice,
            slice_pause_s=settings.result_slice_pause_s,
            retry_deadline_s=settings.read_retry_deadline_s)
        # A session's job: by default the batch job over its offset ranges; the streaming
        # service passes its finish (spark/folding/service_fold.py).
        self._job = job or self._batch_job

    def submit(self, partition: int, offset: int, ended: SessionEnded) -> None:
        """Queue the job of the SessionEnded at `partition`/`offset` of `sessions`."""
        self._jobs.put((partition, offset, ended))

    def running_clients(self) -> set[str]:
        """The clients whose job runs now (a copy)."""
        with self._running_lock:
            return set(self._running_clients)

    def start(self) -> None:
        # Daemon threads: a stop never waits for a job stuck in a broker call.
        for index in range(self.settings.sessions_concurrent_max):
            worker = threading.Thread(target=self._work, args=(f"sessions-{index}",),
                                      name=f"session-worker-{index}", daemon=True)
            worker.start()
            self._threads.append(worker)

    def stop(self) -> None:
        if self.stop_requested.is_set():
            # Running jobs fail fast instead of finishing; their sessions stay uncommitted.
            stop_spark_quietly(self.spark.sparkContext.cancelAllJobs, "cancelling jobs")
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        for worker in self._threads:
            worker.join(max(0.0, deadline - time.monotonic()))
        busy = sum(worker.is_alive() for worker in self._threads)
        if busy:
            log.info("%d session job(s) still running at shutdown: left uncommitted, redone by "
                     "the next start", busy)

    def _batch_job(self, ended: SessionEnded, pool: str):
        return run_session_job(self.spark, ended, self._job_settings, pool, self.stop_requested)

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
                self.finished.put(Finished(partition, offset))

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
                report = self.metrics.timed_job(self._job, ended, pool)
            except (ResultWriteInterruptedError, FoldInterruptedError) as error:
                log.info("session %s: interrupted (%s); redone on restart", cid, error)
                return None
            except (*JOB_ERRORS, FoldNotCaughtUpError) as error:
                if self.stop_requested.is_set():
                    log.info("session %s: stopped mid-job; redone on restart", cid)
                    return None
                if is_malformed_payload(error):
                    # The client's own bytes: every attempt would fail the same way.
                    self._count("sessions_given_up")
                    self._count("sessions_malformed_payload")
                    log.error("session %s: a rows payload is malformed (%s); given up at once, "
                              "its client gets no results", cid, first_line(error))
                    return False
                pause_s = self._retry_backoff.delay_s(attempt - 1)
                log.warning("session %s: attempt %d of %d failed after %.1f s (%s: %s)", cid,
                            attempt, self.settings.session_attempts_max,
                            time.monotonic() - started, type(error).__name__,
                            first_line(error))
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
