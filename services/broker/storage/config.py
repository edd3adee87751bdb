"""LogConfig: every bound of the broker's storage, with units last in the names; the broker's
storage flags are declared on its fields (common/config_flags.py)."""

from __future__ import annotations

from dataclasses import dataclass

from common.config_flags import setting
from common.kaska.record_batch import HEADER_BYTES

SEGMENT_HEADER_BYTES = 16
POSITION_MAX = 2**32 - 1  # index positions are u32
SEGMENT_ROLL_BYTES_MIN = 1024  # below this a segment would hold a batch or two at most


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Storage settings of one broker (Kafka's names in brackets).

    segment_bytes_max     size a log file is preallocated to; a segment rolls when the next
                          batch would not fit [segment.bytes]
    segment_roll_bytes    a topic's own segment size: a non-empty segment also rolls when the
                          next batch would take it past this many bytes (header included);
                          None = segment_bytes_max. Files are still preallocated to
                          segment_bytes_max, so a batch of batch_bytes_max always fits an
                          empty segment [a topic's segment.bytes]
    index_interval_bytes  log bytes between two sparse index entries [index.interval.bytes]
    retention_bytes       partition size above which whole old segments are deleted; None =
                          unbounded [retention.bytes]
    retention_ms          age (newest batch timestamp) above which a segment is deleted; None =
                          forever [retention.ms]
    flush_interval_ms     fsync at most this long after an append; None = never (the page cache
                          survives a SIGKILL; only a machine crash loses unflushed data), 0 =
                          every append [flush.ms]
    batch_bytes_max       largest record batch accepted [message.max.bytes]; None = as large
                          as a segment holds after its header
    producer_ids_max      producers remembered per partition for deduplication; the least
                          recently seen is forgotten beyond it
    reserve_ahead_bytes   disk blocks the active segment reserves (posix_fallocate) beyond
                          the batch being appended, so that most appends reserve nothing; the
                          unused rest is given back when the segment is sealed (disk_space.py)
    """

    segment_bytes_max: int = setting(
        "--segment-bytes-max", "size a log segment file is preallocated to; a segment rolls "
        "when the next batch would not fit", default=64 * 1024 * 1024)
    segment_roll_bytes: int | None = None
    index_interval_bytes: int = 4096
    retention_bytes: int | None = setting(
        "--retention-bytes", "partition size above which whole old segments are deleted "
        "(absent: unbounded)", default=None, parse=int)
    retention_ms: int | None = setting(
        "--retention-ms", "age (newest batch timestamp) above which a segment is deleted "
        "(absent: forever)", default=None, parse=int)
    flush_interval_ms: int | None = setting(
        "--flush-interval-ms", "fsync at most this long after an append (absent: never, the "
        "page cache survives a SIGKILL; 0: every append)", default=None, parse=int)
    batch_bytes_max: int | None = None
    producer_ids_max: int = 10_000
    reserve_ahead_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if self.batch_bytes_max is None:
            object.__setattr__(self, "batch_bytes_max",
                               self.segment_bytes_max - SEGMENT_HEADER_BYTES)
        if self.batch_bytes_max < HEADER_BYTES:
            raise ValueError(f"batch_bytes_max {self.batch_bytes_max} is below a batch header")
        if self.segment_bytes_max < SEGMENT_HEADER_BYTES + self.batch_bytes_max:
            raise ValueError("segment_bytes_max must hold the segment header and one batch of "
                             f"batch_bytes_max ({self.batch_bytes_max})")
        if self.segment_bytes_max > POSITION_MAX:
            raise ValueError(f"segment_bytes_max above {POSITION_MAX} (u32 index positions)")
        if self.segment_roll_bytes is not None and not \
                SEGMENT_ROLL_BYTES_MIN <= self.segment_roll_bytes <= self.segment_bytes_max:
            raise ValueError(f"segment_roll_bytes {self.segment_roll_bytes} outside "
                             f"[{SEGMENT_ROLL_BYTES_MIN}, segment_bytes_max "
                             f"{self.segment_bytes_max}]")
        if self.index_interval_bytes < 1:
            raise ValueError("index_interval_bytes must be positive")
        for name in ("retention_bytes", "retention_ms", "flush_interval_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be None or >= 0")
        if self.producer_ids_max < 1:
            raise ValueError("producer_ids_max must be positive")
        if self.reserve_ahead_bytes < 0:
            raise ValueError("reserve_ahead_bytes must be >= 0")
