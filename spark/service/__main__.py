"""The query service: one long-running Spark application that answers every ended session.

    python -m spark.service --brokers H:P[,H:P] --master local[2] [--checkpoint-dir DIR]
        [--heartbeat-targets H:P[,...]] [--sessions-concurrent-max N]
        [--finished-session-retention-s S | --keep-finished-sessions] ...

Follows the `sessions` topic. For each SessionEnded it runs `spark.service.session_job` (Q1-Q4 over
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
and never before its SessionEnded is committed (rules: spark/service/session_cleanup.py). The acks'
places are tracked by a second cursor, group `query-service-cleanup` (or store
`sessions-cleanup` with `--checkpoint-dir`), committed once the topics are gone, so a service
killed after an ack deletes them after its restart. Reading starts at the lower cursor; records
below the job cursor start no job, nor does a SessionEnded whose client acknowledged its
results in what `sessions` held at the start (read once then: spark/service/acks_ahead.py).

A failed job (broker unreachable past the read deadline, executor lost...) is retried with
backoff up to `--session-attempts-max` times, then logged as given up and skipped.

SIGTERM/SIGINT: stop reading sessions, cancel running jobs, stop Spark, exit 0 within a few
seconds; unfinished sessions are not committed and are redone by the next start.

In local mode Spark does not retry failed tasks unless the master says so (`local[N,F]`); the
`kaska` reader retries on its own (`--read-retry-deadline-s`) and the job-level retry covers
the rest.

This module is the entry point: the command line and the start-up and shutdown order. The
parts, one concern each: spark/service/service_settings.py (the settings),
spark/service/query_service.py (the main loop over `sessions`, commits, topic deletion),
spark/service/session_workers.py (the jobs and their retries), spark/service/progress_store.py
(where progress is kept), spark/service/driver.py (the SparkSession, warm-up, stopping Spark).
Threads: the main thread runs the loop; signal handlers only set the stop event.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import threading
from pathlib import Path

from common.cluster_secret import ClusterSecretError
from common.essential_threads import exit_on_essential_thread_death
from common.heartbeat import HeartbeatConfigError, heartbeat_secret
from common.liveness import HealthCheck
from common.metrics_http import MetricsBindError, MetricsEndpoint
from common.service_cli import (
    add_heartbeat_flags,
    add_log_level_flag,
    add_metrics_listen_flag,
    configure_logging,
    handle_stop_signals,
    start_heartbeats,
)
from spark.folding.service_fold import ServiceFold
from spark.folding.stream_query import StreamSettings
from spark.folding.warm_up import SAMPLE_ROWS_DEFAULT as FOLD_WARM_UP_ROWS_MAX
from spark.service.driver import (
    spark_session,
    stop_spark_quietly,
    warm_up_idle_in_background,
    warm_up_quietly,
    warm_up_when_settled,
)
from spark.service.metrics import query_service_registry
from spark.service.query_service import QueryService
from spark.service.result_writer import RESULT_ROWS_PER_SLICE_DEFAULT
from spark.service.service_settings import (
    SERVICE_NAME,
    WARM_UP_IDLE_PASSES_DEFAULT,
    ServiceSettings,
)
from spark.service.warm_up import SAMPLE_ROWS_DEFAULT as WARM_UP_ROWS_DEFAULT

log = logging.getLogger("spark.service")


def parse_args(argv: list[str] | None = None) -> ServiceSettings:
    parser = argparse.ArgumentParser(prog="python -m spark.service",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", required=True, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--master", default="local[2]", help="local[N], local[N,F], spark://...")
    parser.add_argument("--token", default=os.environ.get("KASKA_TOKEN"))
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="keep progress in a local checkpoint store instead of the broker")
    add_heartbeat_flags(parser, targets_help="health checkers, HOST:PORT[,...]")
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
    add_metrics_listen_flag(parser)
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
                             "(spark/service/warm_up.py; 0: serve cold)")
    parser.add_argument("--warm-up-settle-s", type=float, default=None,
                        help="warm up beside serving instead, this many seconds after the "
                             "master granted a first executor (a deployment starting all its "
                             "JVMs at once); skipped if a session job runs by then")
    parser.add_argument("--warm-up-idle-passes", type=int, default=WARM_UP_IDLE_PASSES_DEFAULT,
                        help="then this many more passes over a small sample, once serving "
                             "and only until the first session comes (0: none)")
    parser.add_argument("--fold", choices=("stream", "batch"), default="stream",
                        help="stream: one Structured Streaming query folds every session as "
                             "it uploads (default); batch: one job per ended session")
    parser.add_argument("--state-dir", type=Path,
                        default=Path(os.environ.get("FLIGHTS_STATE_DIR", "state/query-service")),
                        help="the stream's checkpoint, each session's fold state and the "
                             "sessions cursor (Compose: a volume the Spark workers mount too)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=24,
                        help="records (client slices, ~11k rows each) per micro-batch")
    parser.add_argument("--trigger-interval-s", type=float, default=0.2)
    parser.add_argument("--fold-wait-s-max", type=float, default=600.0,
                        help="how long an ended session's finish waits for the stream")
    parser.add_argument("--fold-range-pause-s", type=float, default=0.0,
                        help="each range read waits this long (fault-injection tests only)")
    add_log_level_flag(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    for name in ("sessions_concurrent_max", "sessions_pending_max", "session_attempts_max",
                 "shuffle_partitions", "result_rows_per_slice", "max_offsets_per_trigger"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.ui_port is not None and not 0 <= args.ui_port <= 65535:
        parser.error(f"--ui-port must lie in [0, 65535], got {args.ui_port}")
    if args.warm_up_settle_s is not None and not 0 <= args.warm_up_settle_s <= 3600:
        parser.error(f"--warm-up-settle-s must lie in [0, 3600], got {args.warm_up_settle_s}")
    for name in ("trigger_interval_s", "fold_wait_s_max"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            parser.error(f"--{name.replace('_', '-')} must be a positive number, got {value}")
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
        healthz_stale_s=args.healthz_stale_s,
        finished_session_retention_s=retention_s, ui_port=args.ui_port,
        warm_up_rows=max(0, args.warm_up_rows), warm_up_settle_s=args.warm_up_settle_s,
        warm_up_idle_passes=max(0, args.warm_up_idle_passes), fold=args.fold,
        state_dir=args.state_dir, max_offsets_per_trigger=args.max_offsets_per_trigger,
        trigger_interval_s=args.trigger_interval_s, fold_wait_s_max=args.fold_wait_s_max,
        fold_range_pause_s=max(0.0, args.fold_range_pause_s))


def service_fold(spark, settings: ServiceSettings, stop: threading.Event) -> ServiceFold | None:
    """The streaming fold of `--fold stream` (None for `batch`)."""
    if settings.fold != "stream":
        return None
    stream = StreamSettings(brokers=settings.brokers, state_dir=settings.state_dir,
                            token=settings.token,
                            max_offsets_per_trigger=settings.max_offsets_per_trigger,
                            trigger_interval_s=settings.trigger_interval_s,
                            retry_deadline_s=settings.read_retry_deadline_s,
                            range_pause_s=settings.fold_range_pause_s)
    return ServiceFold(spark, stream, stop, rows_per_slice=settings.rows_per_slice,
                       slice_pause_s=settings.result_slice_pause_s,
                       fold_wait_s_max=settings.fold_wait_s_max)


def query_service_health(service: QueryService, stale_after_s: float) -> HealthCheck:
    """/healthz: the session loop went round within `stale_after_s`; 503 before it starts
    (Spark still starting or warming up: no session would be served yet)."""

    def loops():
        progress = service.session_loop_progress
        return () if progress is None else (progress,)

    def ready() -> str | None:
        if service.session_loop_progress is None:
            return "session loop not started yet (Spark starting or warming up)"
        return None

    return HealthCheck(loops, stale_after_s, ready)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    stop_requested = threading.Event()
    # Before Spark starts (it takes seconds): a SIGTERM meanwhile still ends in a clean exit.
    handle_stop_signals(stop_requested.set, log)
    # A session worker that died of a bug takes its share of the sessions with it, silently:
    # exit instead, and be restarted (jobs are redone from the checkpoint; writes are
    # idempotent). Not during a stop: jobs cancelled then may raise in their workers.
    exit_on_essential_thread_death(("session-worker-",), stopping=stop_requested.is_set)
    try:
        secret = heartbeat_secret(settings.heartbeat_targets, settings.secret_file)
    except (ClusterSecretError, HeartbeatConfigError) as error:
        log.error("%s: %s", type(error).__name__, error)
        return 2
    heartbeat = start_heartbeats(SERVICE_NAME, settings.heartbeat_targets,
                                 settings.heartbeat_interval_s, secret)
    spark = spark_session(settings)
    fold = service_fold(spark, settings, stop_requested)
    service = QueryService(settings, spark, stop_requested, fold=fold)
    try:
        metrics = MetricsEndpoint.start_optional(
            settings.metrics_listen, lambda: query_service_registry(service),
            query_service_health(service, settings.healthz_stale_s))
    except MetricsBindError as error:
        log.error("%s: %s", type(error).__name__, error)
        stop_spark_quietly(spark.stop, "stopping Spark")
        if heartbeat is not None:
            heartbeat.stop()
        return 2

    def busy() -> bool:
        return service.metrics.snapshot()[0] > 0  # a session job runs

    if fold is not None:
        fold.start(min(settings.warm_up_rows, FOLD_WARM_UP_ROWS_MAX))
    elif settings.warm_up_settle_s is None:
        if warm_up_quietly(spark, settings.warm_up_rows):
            warm_up_idle_in_background(spark, settings.warm_up_idle_passes, stop_requested,
                                       service.has_seen_sessions)
    else:
        warm_up_when_settled(spark, settings.warm_up_rows, settings.warm_up_settle_s,
                             stop_requested, busy, idle_passes=settings.warm_up_idle_passes,
                             sessions_seen=service.has_seen_sessions)
    log.info("query service up: brokers %s, master %s, %d concurrent sessions, finished "
             "sessions' topics %s", settings.brokers, settings.master,
             settings.sessions_concurrent_max,
             f"deleted {settings.finished_session_retention_s:g} s after the ack"
             if settings.deletes_finished_sessions else "kept")
    try:
        service.run()
    finally:
        if fold is not None:
            fold.stop()
        if metrics is not None:
            metrics.stop()
        stop_spark_quietly(spark.stop, "stopping Spark")
        if heartbeat is not None:
            heartbeat.stop()
        log.info("query service stopped: %s", service.counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
