"""One ended session's job: Q1-Q4 over exactly its offset ranges, then its results written.

`SessionEnded.end_offsets` names, for `airports.<cid>` and `flights.<cid>`, the end offset of
every partition; the job reads [0, end) of each through the `kaska` source (only the columns
the queries use; the flights' query fields derived in the source's workers, given the
session's airports), computes the queries (`spark.rules.derived_queries`), and streams each query's
rows, sorted by Spark, through a `QueryResultWriter` (a slice at a time: the driver never holds
a whole result), the four queries at once.

QueryDone.invalid carries the run's invalid-row counts by kind (docs/queries.md "Valid rows", every
kind, zeros included) for every query, and for q2 also `unknown_airport`: the valid rows Q2
skipped because their origin or destination is not in the airports file.

Thread-safety: `run_session_job` may run in several threads at once over one SparkSession;
each thread names its FAIR scheduler pool (a thread-local Spark property).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark.util import inheritable_thread_target

from common.flights.session_records import (
    QUERIES,
    MalformedSessionRecordError,
    SessionEnded,
    airports_topic,
    flights_topic,
    results_topic,
)
from common.kaska import Admin
from common.kaska.errors import InvalidTopicError, TopicAlreadyExistsError
from common.kaska.topic_name import validate_topic_name
from spark.rules.contract import AIRPORT_COLUMNS, FLIGHT_COLUMNS
from spark.rules.derived_queries import airport_coordinates, compute_all_derived
from spark.rules.result_order import sorted_result_rows
from spark.service.result_writer import RESULT_ROWS_PER_SLICE_DEFAULT, QueryResultWriter
from spark.source.kaska_source import SOURCE_NAME, offsets_json

log = logging.getLogger(__name__)

UNKNOWN_AIRPORT = "unknown_airport"
FLIGHT_FIELDS_TRANSFORM = "spark.rules.flight_fields:derive"
SCHEDULER_POOL_PROPERTY = "spark.scheduler.pool"
RESULTS_PARTITIONS = 1  # common/flights/session_records.py: results.<cid> has one partition


@dataclass(frozen=True)
class JobSettings:
    brokers: str
    token: str | None = None
    rows_per_slice: int = RESULT_ROWS_PER_SLICE_DEFAULT
    slice_pause_s: float = 0.0  # fault-injection tests only: widens the mid-write window
    retry_deadline_s: float = 60.0  # how long a read task rides out an unavailable broker


@dataclass
class JobReport:
    client_id: str
    rows: int = 0
    valid_rows: int = 0
    query_rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def validate_session(ended: SessionEnded) -> None:
    """MalformedSessionRecordError unless the record names a usable session."""
    cid = ended.client_id
    if not isinstance(cid, str) or not cid:
        raise MalformedSessionRecordError(f"bad client_id {cid!r}")
    try:
        validate_topic_name(flights_topic(cid))
    except InvalidTopicError as error:
        raise MalformedSessionRecordError(f"client_id {cid[:60]!r}: {error}") from error
    ends = ended.end_offsets
    for topic in (airports_topic(cid), flights_topic(cid)):
        offsets = ends.get(topic) if isinstance(ends, dict) else None
        if not (isinstance(offsets, list) and offsets and all(
                isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)):
            raise MalformedSessionRecordError(f"end_offsets of {topic} missing or malformed")


def run_session_job(spark, ended: SessionEnded, settings: JobSettings, pool: str,
                    stop: threading.Event) -> JobReport:
    """Compute and write one session's results, the Spark jobs in FAIR pool `pool`; raises
    on failure (the caller retries)."""
    cid = ended.client_id
    report = JobReport(cid)
    context = spark.sparkContext
    context.setLocalProperty(SCHEDULER_POOL_PROPERTY, pool)
    context.setJobGroup(f"session-{cid}", f"queries of session {cid}", interruptOnCancel=True)
    try:
        started = time.monotonic()
        # The flights' query fields, the airports' distances included, are derived in the
        # source's Python workers, columnar, before Spark sees a row (spark/rules/flight_fields.py).
        airports = _topic_frame(spark, settings, airports_topic(cid), ended, AIRPORT_COLUMNS)
        coordinates = airport_coordinates(airports)
        flights = _topic_frame(spark, settings, flights_topic(cid), ended, FLIGHT_COLUMNS,
                               FLIGHT_FIELDS_TRANSFORM, coordinates.to_json())
        results = compute_all_derived(flights)
        report.rows, report.valid_rows = results.rows, results.valid_rows
        report.seconds["read_and_prepare"] = time.monotonic() - started
        log.info("session %s: %d rows read (%d valid; invalid %s; %d unknown-airport rows "
                 "for q2) in %.2f s", cid, results.rows, results.valid_rows,
                 json.dumps(results.invalid_counts), results.q2_skipped,
                 report.seconds["read_and_prepare"])
        try:
            _write(results, ended, settings, stop, report)
        finally:
            results.release()
    finally:
        context.setLocalProperty(SCHEDULER_POOL_PROPERTY, None)
    return report


def _topic_frame(spark, settings: JobSettings, topic: str, ended: SessionEnded, columns,
                 transform: str | None = None, transform_argument: str | None = None):
    ends = ended.end_offsets[topic]
    reader = (spark.read.format(SOURCE_NAME)
              .option("brokers", settings.brokers).option("topic", topic)
              .option("startingOffsets", offsets_json(topic, [0] * len(ends)))
              .option("endingOffsets", offsets_json(topic, ends))
              .option("columns", json.dumps(list(columns)))
              .option("includeIds", "false")  # the queries number rows themselves
              .option("retryDeadlineS", str(settings.retry_deadline_s)))
    if transform is not None:
        reader = reader.option("arrowTransform", transform)
    if transform_argument is not None:
        reader = reader.option("arrowTransformArgument", transform_argument)
    if settings.token is not None:
        reader = reader.option("token", settings.token)
    return reader.load()


def _ensure_results_topic(settings: JobSettings, client_id: str) -> None:
    """Clients create `results.<cid>` when they open a session; making sure costs one request
    and keeps the service's answer from depending on it."""
    with Admin(settings.brokers, token=settings.token) as admin:
        try:
            admin.create_topic(results_topic(client_id), RESULTS_PARTITIONS)
        except TopicAlreadyExistsError:
            pass  # the usual case


def _write(results, ended: SessionEnded, settings: JobSettings, stop: threading.Event,
           report: JobReport) -> None:
    """Every query's rows straight from Spark to its result slices, then its QueryDone; the
    four queries at once, each in its own thread."""
    started = time.monotonic()
    _ensure_results_topic(settings, ended.client_id)
    queries = results.frames()
    # Why at once: Q1, Q3 and Q4 are a few thousand rows at most, and most of their time is
    # waiting (planning, scheduling, a round trip per slice and QueryDone), which one after
    # the other added up to ~1.5 s of a 2M-row session's write phase beside Q2's ~1 s. Each
    # query has its own producer and sequence numbers, so a re-run still writes the same
    # batches; the threads inherit the session's FAIR pool and job group.
    with ThreadPoolExecutor(max_workers=len(queries),
                            thread_name_prefix=f"results-{ended.client_id[:8]}") as pool:
        futures = {query: pool.submit(inheritable_thread_target(_write_query), query, frame,
                                      results, ended, settings, stop)
                   for query, frame in queries.items()}
        # Each query runs to its end or its own error; the first error (in query order) is
        # the job's, and the caller redoes the whole job.
        outcomes = {query: future.result() for query, future in futures.items()}
    old_duplicates = 0
    for query, (rows, duplicates, seconds) in outcomes.items():
        report.query_rows[query], report.seconds[query] = rows, seconds
        old_duplicates += duplicates
    report.seconds["write"] = time.monotonic() - started
    log.info("session %s: results written in %.2f s (%d batches dropped by the broker as "
             "written by an earlier run); result rows %s, seconds per query (computed and "
             "written, at once) %s", ended.client_id, report.seconds["write"], old_duplicates,
             json.dumps(report.query_rows),
             json.dumps({q: round(report.seconds[q], 2) for q in QUERIES}))


def _write_query(query: str, frame, results, ended: SessionEnded, settings: JobSettings,
                 stop: threading.Event) -> tuple[int, int, float]:
    """(rows written, batches the broker called old duplicates, seconds) of one query."""
    started = time.monotonic()
    invalid = dict(results.invalid_counts)
    if query == "q2":
        invalid[UNKNOWN_AIRPORT] = results.q2_skipped
    with QueryResultWriter(settings.brokers, ended.client_id, query, token=settings.token,
                           rows_per_slice=settings.rows_per_slice,
                           slice_pause_s=settings.slice_pause_s, stop=stop) as writer:
        rows = writer.write(sorted_result_rows(query, frame, results.rows), invalid)
        return rows, writer.old_duplicates, time.monotonic() - started
