"""The query service's Prometheus metrics: `JobMetrics` times each session job attempt (a
`prometheus_client.Histogram`) and adds up its rows; `QueryServiceCollector` reads the rows and
the service's own counts at scrape time. `query_service_registry` holds both.

Metric families (`query_service_` prefix):
- `query_service_sessions_started_total`: SessionStarted records read from `sessions`;
- `query_service_sessions_picked_up_total`: SessionEnded records handed to a worker;
- `query_service_sessions_completed_total{outcome}`: done, or given up after every attempt;
- `query_service_records_skipped_total`, `query_service_records_malformed_total`: `sessions`
  records that start no job (SessionStarted and unknown kinds), and ones that do not parse;
- `query_service_sessions_acked_total`: ResultsAcked records (clients holding their results);
- `query_service_sessions_cleaned_total`, `query_service_session_topics_deleted_total`:
  acknowledged sessions whose topics are gone, and the topics this process deleted (one already
  gone is not counted);
- `query_service_job_seconds{outcome}` (histogram): one attempt of a session job, done, failed
  (retried or given up) or interrupted (a stop);
- `query_service_jobs_running`; `query_service_sessions_pending` (picked up, not finished: the
  backlog; what is not even read yet is `kaska_consumergroup_lag{group="query-service"}` on
  the brokers, where the service commits its position there);
- `query_service_input_rows_total`, `query_service_result_rows_total{query}`: of done jobs (a
  job redone after a crash counts again: these are rows computed, not rows stored).
Counts restart from zero with the process, as Prometheus counters may.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spark.service.result_writer import ResultWriteInterruptedError

OUTCOME_DONE = "done"
OUTCOME_FAILED = "failed"
OUTCOME_INTERRUPTED = "interrupted"
OUTCOMES = (OUTCOME_DONE, OUTCOME_FAILED, OUTCOME_INTERRUPTED)
# A session job takes from a second (a tiny session on a warm driver) to many minutes.
JOB_BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class JobMetrics:
    """Session job attempts. Thread-safe: the session workers add, the scrape thread reads.
    `job_seconds` is in no registry yet: `query_service_registry` registers it in the
    service's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 buckets_s: tuple[float, ...] = JOB_BUCKETS_S) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.job_seconds = Histogram("query_service_job_seconds",
                                     "Seconds of one session job attempt, by outcome.",
                                     ["outcome"], buckets=buckets_s, registry=None)
        for outcome in OUTCOMES:  # every outcome exported from the start, at zero
            self.job_seconds.labels(outcome)
        self._running = 0
        self._input_rows = 0
        self._result_rows: Counter[str] = Counter()

    def timed_job(self, run: Callable, *args):
        """`run(*args)` (a `spark.service.session_job.run_session_job`), timed; its JobReport."""
        started = self._clock()
        outcome = OUTCOME_FAILED
        with self._lock:
            self._running += 1
        try:
            report = run(*args)
            outcome = OUTCOME_DONE
        except ResultWriteInterruptedError:
            outcome = OUTCOME_INTERRUPTED
            raise
        finally:
            # A clock step counts as 0: a histogram's sum must not go down.
            self.job_seconds.labels(outcome).observe(max(self._clock() - started, 0.0))
            with self._lock:
                self._running -= 1
        with self._lock:
            self._input_rows += report.rows
            self._result_rows.update(report.query_rows)
        return report

    def snapshot(self) -> tuple[int, int, dict[str, int]]:
        """(jobs running, input rows, result rows by query) of done jobs."""
        with self._lock:
            return self._running, self._input_rows, dict(self._result_rows)


class QueryServiceCollector(Collector):
    """Reads one QueryService (duck-typed: `counts`, `metrics`) at scrape time."""

    def __init__(self, service) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        # One C-level copy of a dict whose keys never change: consistent enough for counters
        # that workers bump under their own lock.
        counts = dict(self._service.counts)
        for name, key, doc in (
            ("sessions_started", "sessions_started", "SessionStarted records read."),
            ("sessions_picked_up", "sessions_picked_up",
             "SessionEnded records handed to a session worker."),
            ("records_skipped", "records_skipped",
             "Records of `sessions` that start no job (SessionStarted, unknown kinds)."),
            ("records_malformed", "records_malformed", "Records of `sessions` that do not parse."),
            ("sessions_acked", "sessions_acked",
             "ResultsAcked records read: clients that saved their results."),
            ("sessions_acked_before_start", "sessions_acked_before_start",
             "SessionEnded records that started no job: their client had acknowledged the "
             "results before this service started (a predecessor did the job)."),
            ("sessions_cleaned", "sessions_cleaned",
             "Acknowledged sessions whose topics are deleted."),
            ("session_topics_deleted", "session_topics_deleted",
             "Topics of acknowledged sessions deleted by this process."),
            ("sessions_malformed_payload", "sessions_malformed_payload",
             "Sessions given up at once: a rows payload did not decode or decoded past its "
             "bound."),
        ):
            yield CounterMetricFamily(f"query_service_{name}", doc, value=counts.get(key, 0))
        completed = CounterMetricFamily("query_service_sessions_completed",
                                        "Sessions finished: done, or given up.",
                                        labels=["outcome"])
        completed.add_metric(["done"], counts.get("sessions_done", 0))
        completed.add_metric(["given_up"], counts.get("sessions_given_up", 0))
        yield completed
        yield GaugeMetricFamily(
            "query_service_sessions_pending", "Sessions picked up whose job has not finished "
            "(running, or waiting for a session worker): the service's backlog. It stops "
            "reading `sessions` while --sessions-pending-max are pending.",
            value=self._service.sessions_pending)
        yield from self._jobs(self._service.metrics)

    @staticmethod
    def _jobs(metrics: JobMetrics) -> Iterator[Metric]:
        running, input_rows, result_rows = metrics.snapshot()
        yield GaugeMetricFamily("query_service_jobs_running", "Session jobs running now.",
                                value=running)
        yield CounterMetricFamily("query_service_input_rows",
                                  "Flight rows read by done session jobs.", value=input_rows)
        rows = CounterMetricFamily("query_service_result_rows",
                                   "Result rows computed by done session jobs, by query.",
                                   labels=["query"])
        for query, value in sorted(result_rows.items()):
            rows.add_metric([query], value)
        yield rows


def query_service_registry(service) -> CollectorRegistry:
    """A registry of one QueryService (its own, not the process-wide default): the collector,
    and the service's job-time histogram."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueryServiceCollector(service))
    registry.register(service.metrics.job_seconds)
    return registry
