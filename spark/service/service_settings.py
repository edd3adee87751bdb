"""The query service's settings: one immutable value the command line builds.

Owns: `ServiceSettings` (every knob of the service, with its default) and `SERVICE_NAME`, the
name the service heartbeats and runs its Spark application under.

Invariants: the command line (spark/service/__main__.py) checks the bounds before it builds one:
counts are >= 1, `sessions_pending_max >= sessions_concurrent_max`, the UI port lies in 0..65535,
the retention is finite (negative: finished sessions' topics are kept).

Threads: none; the settings are immutable and shared by every thread of the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.liveness import STALE_AFTER_S_DEFAULT
from spark.service.result_writer import RESULT_ROWS_PER_SLICE_DEFAULT
from spark.service.warm_up import SAMPLE_ROWS_DEFAULT as WARM_UP_ROWS_DEFAULT

SERVICE_NAME = "query-service"
WARM_UP_IDLE_PASSES_DEFAULT = 6


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
    healthz_stale_s: float = STALE_AFTER_S_DEFAULT  # /healthz: 503 once the loop stalls this long
    warm_up_rows: int = WARM_UP_ROWS_DEFAULT  # 0: serve cold
    # >= 0: warm up beside serving, this long after the first executor (0 s included);
    # None: before serving.
    warm_up_settle_s: float | None = None
    # More warm-up passes once serving, only until the first session comes (driver.py's
    # `warm_up_while_idle`); 0: none.
    warm_up_idle_passes: int = WARM_UP_IDLE_PASSES_DEFAULT
    # The driver's Spark UI: None = Spark's default port (4040) on a cluster and off in local
    # mode (tests start many drivers); 0 = off; a port = on, also in local mode.
    ui_port: int | None = None
    # Seconds an acknowledged session's topics are kept; negative: kept for ever.
    finished_session_retention_s: float = 0.0
    # "stream": one Structured Streaming query folds every session as it uploads
    # (spark/folding/); "batch": a batch job per ended session (spark/service/session_job.py).
    fold: str = "stream"
    # The fold's state: Spark's stream checkpoint, each session's files, the `sessions` cursor.
    state_dir: Path = Path("state/query-service")
    max_offsets_per_trigger: int = 24  # records per micro-batch
    trigger_interval_s: float = 0.2
    fold_wait_s_max: float = 600.0  # a finish waits this long for the stream, then retries
    fold_range_pause_s: float = 0.0  # fault-injection tests only: each range read waits

    @property
    def deletes_finished_sessions(self) -> bool:
        return self.finished_session_retention_s >= 0

