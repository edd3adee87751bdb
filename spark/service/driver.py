"""The query service's Spark driver: its SparkSession, warming it up, stopping it.

Owns: `spark_session` (FAIR scheduling between session jobs, the `kaska` source registered,
the driver UI per `ServiceSettings.ui_port`), `warm_up_quietly` (before serving),
`warm_up_when_settled` (beside serving, once the deployment has settled), `warm_up_while_idle`
(more passes once serving, only until the first session comes), `stop_spark_quietly`, and
`JOB_ERRORS`, the failures of a job that the next attempt may fix.

Invariants: nothing here raises into the service for a Spark that is cold or already stopping:
a failed warm-up leaves Spark cold, a stop during shutdown tolerates a JVM already gone.

Threads: `spark_session` and the stops run on the main thread; the session itself is shared by
the session workers (Spark's scheduler is thread-safe; each worker has its own FAIR pool); a
settled warm-up and the idle passes run on one daemon thread of their own, in their own pool.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from common.kaska.errors import KaskaError
from spark.rules.query_frames import SESSION_CONFIG
from spark.service.service_settings import SERVICE_NAME, ServiceSettings
from spark.service.session_job import SCHEDULER_POOL_PROPERTY
from spark.service.warm_up import WarmUpError, warm_up
from spark.source.kaska_source import register

# The service's one logger, as before the split: its log lines read the same.
log = logging.getLogger("spark.service")
REPO = Path(__file__).resolve().parents[2]
# The streaming fold's JVMs only schedule, carry a few partials and keep the offsets; the rows
# are folded in the Python workers. C2 compiling that control code cost a warm 2M-row session
# 2.3 of the JVM's 5.5 CPU-s (C1 0.5 more) and gave nothing back: C1 alone compiles it.
STREAM_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
# A job failure the next attempt may fix: Spark's (task/stage/executor failures surface as
# these) and the broker's.
JOB_ERRORS = (PySparkException, Py4JError, KaskaError)


def warm_up_quietly(spark, sample_rows: int) -> bool:
    """Pay the first job's cost now (spark/service/warm_up.py); a failure only leaves Spark cold.
    Whether the pass ran and gave the sample's results."""
    if sample_rows <= 0:
        return False
    try:
        seconds = warm_up(spark, sample_rows)
    except (*JOB_ERRORS, WarmUpError) as error:
        log.warning("warm-up failed, serving cold: %s: %s", type(error).__name__,
                    first_line(error))
        return False
    log.info("warmed up in %.1f s (Q1-Q4 over %d sample rows)", seconds, sample_rows)
    return True


def warm_up_while_idle(run_pass: Callable[[], bool], passes: int, stop: threading.Event,
                       busy: Callable[[], bool], idle_first_s: float = 0.0) -> int:
    """Up to `passes` more warm-up passes, each started only while `busy()` is false (the
    service: no session seen yet, neither uploading nor ended); the passes that ran.

    Why: the JIT compiles what runs often, and most of a pass is Spark's own planning,
    scheduling and collecting, which one pass runs too few times to reach C2's thresholds; the
    first session then pays those compilations (measured, docs/benchmarks.md: 6 more passes of 4k
    rows cut a fresh 2M-row session's JIT compilations from 6,682 to 2,853). Run in idle time, they
    cost a restarted service no time before it serves. They stop at the first session, not only at
    its job: beside an upload they took the client's and brokers' cores (2026-11-27, 2M rows,
    the client at once: upload 9.7 and 7.8 s against 6.5 and 5.7, the session 1-3 s longer).
    From then on the sessions warm the JIT themselves. The first pass waits `idle_first_s`:
    a client started with the service is seen by then, and no pass competes with its upload
    (without the wait one pass did, and cost that session 3-5 CPU-s)."""
    if stop.wait(idle_first_s):
        return 0
    done = 0
    while done < passes and not stop.is_set() and not busy():
        if not run_pass():
            break
        done += 1
    log.info("idle warm-up: %d of %d passes ran%s", done, passes,
             "" if done == passes else " (a session came, a stop, or a failure)")
    return done


# The rows of each idle pass: the JIT needs the plans run again, not more rows (a pass of 4k
# rows takes about as long to plan, schedule and collect as one of 200k).
IDLE_PASS_ROWS = 4_000
IDLE_FIRST_S = 5.0  # idle this long after the first pass before the idle passes begin
WARM_UP_POOL = "warm-up"  # its own FAIR pool: a session arriving meanwhile is not queued behind
SETTLE_POLL_S = 1.0


def warm_up_when_settled(spark, sample_rows: int, settle_s: float, stop: threading.Event,
                         busy: Callable[[], bool], settle_s_max: float = 600.0,
                         idle_passes: int = 0,
                         sessions_seen: Callable[[], bool] | None = None
                         ) -> threading.Thread | None:
    """Warm up on a thread of its own once the deployment has settled, while the service
    already takes sessions (Compose: at a deployment's start every JVM starts on the same
    host, and a warm-up then competed with all of them). Settled: the master has granted an
    executor (none to wait for in local mode), then `settle_s` has passed. Skipped when a
    session job already runs (it pays the first job's cost itself), on a stop, or when no
    executor came within `settle_s_max`."""
    if sample_rows <= 0:
        return None

    def run() -> None:
        deadline = time.monotonic() + settle_s_max
        while not _has_executor(spark):
            if time.monotonic() > deadline:
                log.warning("no executor within %.0f s: serving cold", settle_s_max)
                return
            if stop.wait(SETTLE_POLL_S):
                return
        if stop.wait(settle_s):
            return
        if busy():
            log.info("warm-up skipped: a session job already runs")
            return
        spark.sparkContext.setLocalProperty(SCHEDULER_POOL_PROPERTY, WARM_UP_POOL)
        if warm_up_quietly(spark, sample_rows):
            _idle_passes(spark, idle_passes, stop, sessions_seen or busy)

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread


def warm_up_idle_in_background(spark, passes: int, stop: threading.Event,
                               busy: Callable[[], bool]) -> threading.Thread | None:
    """`warm_up_while_idle` on a thread of its own, in the warm-up pool, for a service that
    warmed up once before serving."""
    if passes <= 0:
        return None

    def run() -> None:
        spark.sparkContext.setLocalProperty(SCHEDULER_POOL_PROPERTY, WARM_UP_POOL)
        _idle_passes(spark, passes, stop, busy)

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread


def _idle_passes(spark, passes: int, stop: threading.Event, busy: Callable[[], bool]) -> None:
    """The idle passes over IDLE_PASS_ROWS, on the calling thread (already in the pool)."""
    warm_up_while_idle(lambda: warm_up_quietly(spark, IDLE_PASS_ROWS), passes, stop, busy,
                       IDLE_FIRST_S)


def _has_executor(spark) -> bool:
    """An executor besides the driver; in local mode the driver runs the tasks itself."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        return True
    try:
        return len(context.statusTracker().getExecutorInfos()) > 1
    except (Py4JError, PySparkException) as error:
        log.info("executors unknown yet: %s", first_line(error))
        return False


def stop_spark_quietly(call, what: str) -> None:
    """`call()` during shutdown, when the JVM may already be gone: a Ctrl-C or a group-wide
    SIGTERM reaches the JVM too, and it stops its SparkContext on its own."""
    try:
        call()
    except (Py4JError, PySparkException, ConnectionError) as error:
        log.info("%s: the JVM is already stopping (%s)", what, first_line(error))


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


def spark_session(settings: ServiceSettings):
    """The service's SparkSession: FAIR scheduling between session jobs, the `kaska` source."""
    from pyspark.sql import SparkSession

    # Python workers import `spark.source.kaska_source` and `common`: make the tree importable for
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
    if settings.fold == "stream":
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            builder = builder.config(key, STREAM_JVM_OPTIONS)
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
