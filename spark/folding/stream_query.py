"""The query service's one Structured Streaming query: every session's flights, folded as they
are acknowledged.

    readStream kaska  subscribePattern flights\\..+  (gate: registered sessions, capped at their
                      end offsets; transform: each range's rows derived and aggregated in the
                      source's Python workers, one partial per range; maxOffsetsPerTrigger
                      records per micro-batch)
      -> foreachBatch: the partials collected as Arrow, folded into each session's state
                       (spark/folding/batch_fold.py, spark/folding/fold_store.py)
      checkpoint: <state dir>/stream (Spark's offsets and commits)

The plan is made once per query, not per session: a session's rows are just more rows.
Exactly once: Spark's checkpoint fixes each micro-batch's offsets before it runs and runs an
uncommitted one again with the same offsets; the fold's effects are idempotent (fold files by
batch id, result batches by sequence number), and the state is rebuilt as of the last commit
before the query (re)starts.

`FoldQuery` supervises it: start, each folded batch's end offsets handed to the store
(finishes wait on them) and to the prefix releaser (which waits for the batch's commit), and a
restart with back-off when the query fails (a broker away past the read deadline, a lost
executor in local mode, a bug in a batch): the state is recovered from disk first, so the
failed batch is folded once.

Threads: `start` and `stop` on the service's main thread; the query runs on Spark's stream
thread (foreachBatch runs there); the supervisor on one daemon thread. No StreamingQueryListener:
its py4j callbacks cost the JVM's listener bus ~60 ms of CPU per micro-batch.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common.backoff import Backoff
from spark.folding.checkpoint_log import (
    batch_end_offsets,
    last_committed_batch,
)
from spark.folding.fold_store import FoldStore
from spark.folding.prefix_release import PrefixReleaser
from spark.folding.session_files import STREAM_CHECKPOINT
from spark.folding.stream_fields import partials_by_session, transform_argument
from spark.rules.contract import FLIGHT_COLUMNS
from spark.service.driver import JOB_ERRORS, first_line
from spark.source.kaska_source import SOURCE_NAME

log = logging.getLogger(__name__)
QUERY_NAME = "flights-fold"
FLIGHTS_PATTERN = r"flights\..+"
TRANSFORM = "spark.folding.stream_fields:fold_rows"
# One Arrow batch, so one partial, per input range: the transform folds a range at once.
ARROW_BATCH_ROWS_MAX = 4_000_000
GATE = "spark.folding.stream_fields:admit"
RESTART_BACKOFF = Backoff(initial_s=1.0, max_s=30.0)
# A SIGTERM must end the service within a few seconds (Compose kills it 10 s after).
STOP_WAIT_S = 3.0


@dataclass(frozen=True)
class StreamSettings:
    brokers: str
    state_dir: Path
    token: str | None = None
    max_offsets_per_trigger: int = 24  # records (~11k rows each at the client's 4 MiB slices)
    trigger_interval_s: float = 0.2
    retry_deadline_s: float = 60.0
    range_pause_s: float = 0.0  # fault-injection tests only (stream_fields.transform_argument)

    @property
    def checkpoint(self) -> Path:
        return self.state_dir / STREAM_CHECKPOINT


def fold_stream(spark, settings: StreamSettings):
    """The streaming frame of every admitted session's derived flight rows."""
    reader = (spark.readStream.format(SOURCE_NAME)
              .option("brokers", settings.brokers)
              .option("subscribePattern", FLIGHTS_PATTERN)
              .option("startingOffsets", "earliest")
              .option("columns", json.dumps(list(FLIGHT_COLUMNS)))
              .option("includeIds", "false")
              .option("arrowTransform", TRANSFORM)
              .option("arrowTransformArgument", transform_argument(settings.state_dir,
                                                                      settings.range_pause_s))
              .option("topicGate", GATE)
              .option("topicGateArgument", str(settings.state_dir))
              .option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
              .option("arrowBatchRowsMax", str(ARROW_BATCH_ROWS_MAX))
              .option("retryDeadlineS", str(settings.retry_deadline_s)))
    if settings.token is not None:
        reader = reader.option("token", settings.token)
    return reader.load()


class FoldQuery:
    def __init__(self, spark, settings: StreamSettings, store: FoldStore,
                 releaser: PrefixReleaser | None, stop: threading.Event) -> None:
        self.spark = spark
        self.settings = settings
        self.store = store
        self.releaser = releaser
        self.stop_requested = stop
        self.restarts = 0
        self._query = None
        self._thread = threading.Thread(target=self._supervise, name="fold-query", daemon=True)

    def start(self) -> None:
        if self.releaser is not None:
            self.releaser.start()
        self._thread.start()

    def wait_started(self, wait_s_max: float) -> bool:
        """Whether the query made its first trigger within `wait_s_max` (its source runner up,
        its checkpoint read, its first offsets asked for)."""
        deadline = time.monotonic() + wait_s_max
        while time.monotonic() < deadline and not self.stop_requested.is_set():
            query = self._query
            if query is not None and query.lastProgress is not None:
                return True
            self.stop_requested.wait(0.1)
        return False

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stop the query, waiting at most `wait_s`: a micro-batch in flight is abandoned
        (Spark's own stop then ends its tasks), and runs again at the next start."""
        query = self._query
        if query is not None:
            stopper = threading.Thread(target=self._stop_query, args=(query,),
                                       name="fold-query-stop", daemon=True)
            stopper.start()
            stopper.join(wait_s)
        self._thread.join(max(0.0, wait_s / 2))

    @staticmethod
    def _stop_query(query) -> None:
        try:
            query.stop()
        except JOB_ERRORS as error:
            log.info("stopping the fold query: %s", first_line(error))

    def _folded(self, batch_id: int, end_offsets) -> None:
        self.store.folded(batch_id, end_offsets)
        if self.releaser is not None:
            self.releaser.offer(batch_id, end_offsets)

    def _supervise(self) -> None:
        failures = 0
        while not self.stop_requested.is_set():
            committed = last_committed_batch(self.settings.checkpoint)
            self.store.recover(committed)
            self.store.folded(committed, batch_end_offsets(self.settings.checkpoint, committed))
            try:
                self._query = self._start_query()
                self._query.awaitTermination()
                if self.stop_requested.is_set():
                    return
                log.error("the fold query ended by itself; starting it again")
            except JOB_ERRORS as error:
                if self.stop_requested.is_set():
                    return
                log.error("the fold query failed: %s: %s", type(error).__name__,
                          first_line(error))
            failures += 1
            self.restarts += 1
            if self.stop_requested.wait(RESTART_BACKOFF.delay_s(min(failures - 1, 8))):
                return

    def _start_query(self):
        def fold_batch(batch, batch_id: int) -> None:
            started = time.monotonic()
            collected = batch.toArrow()
            read_s = time.monotonic() - started
            self.store.fold(batch_id, partials_by_session(collected))
            # Spark logged the batch's end offsets before running it (checkpoint_log.py).
            self._folded(batch_id, batch_end_offsets(self.settings.checkpoint, batch_id))
            rows = sum(collected["rows"].to_pylist())
            if rows:
                log.info("micro-batch %d: %d partials of %d rows read in %.2f s, folded in "
                         "%.2f s", batch_id, collected.num_rows, rows, read_s,
                         time.monotonic() - started - read_s)

        return (fold_stream(self.spark, self.settings).writeStream
                .queryName(QUERY_NAME)
                .foreachBatch(fold_batch)
                .option("checkpointLocation", str(self.settings.checkpoint))
                .trigger(processingTime=f"{int(self.settings.trigger_interval_s * 1000)} "
                                        "milliseconds")
                .start())
