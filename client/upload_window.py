"""Flow control of the flights upload: the client never runs more than a window ahead of the
query service's folding (DESIGN §1 step 4).

The query service moves each flights partition's log start offset forward once it has folded
a prefix of it durably (DeleteRecords). The bytes the brokers hold for this session are the
payload bytes of the records at offsets >= the log start; the client sent every one of them, so
it tracks them exactly: per partition a deque of (offset, payload bytes) of its acknowledged
records, oldest first, and their sum (`backlog_bytes`). Records below the log start are dropped
from the deque as the polled log start passes them.

Rule: a record may be produced to partition p only while p's backlog is at most its share of
the window (`window_bytes // partitions`, at least 1) and p's deque holds fewer than
`records_held_max` entries. So a partition holds at most its share plus one record; a record
larger than the share still goes once the backlog is empty (never stuck on a big record).

The log start is asked (`log_start(partition)`, passed in: ListOffsets earliest through
`common.kaska.patience` in the client) at most every `poll_interval_s` per partition, and only
while the backlog is near (`NEAR_SHARE` of the share) or over it; far below it nothing is asked.

Offsets: a record's offset comes from the produce answer. An answer without one (a duplicate
older than the broker remembers) is placed at offset == its sequence: only this client writes
its flights partitions, one record per batch, sequences dense from 0. Offsets at or below the
last one tracked, or below the known log start, are ignored (a re-sent record counted already,
or folded already).

Resume: a resumed client tracks what it re-sends (duplicates still answer their offsets) and
sizes the messages it skips (acknowledged before the restart) by encoding them again, only
those at sequences >= the log start (`wants_size`); so the backlog it rebuilds is exact, and the
client is neither stuck (nothing is counted that the service folded) nor unbounded.

`wait_for_room` blocks a sender until its partition may produce, polling as above; a set stop
event ends the wait at once with `UploadInterruptedError`. The clock and the waiting (an
Event-like `wait(timeout)`) are passed in, so tests step it without sleeping.

Thread-safety: one lock guards everything; sender threads of different partitions may call at
once (the log-start call runs outside the lock).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_BYTES_DEFAULT = 128 * 1024 * 1024
POLL_INTERVAL_S_DEFAULT = 0.2
RECORDS_HELD_MAX_DEFAULT = 100_000
NEAR_SHARE = 0.75  # poll the log start once the backlog passes this share of the window
WAIT_STEP_S_MAX = 1.0  # a held sender re-checks its stop event at least this often


class UploadWindowConfigError(ValueError):
    """A flow-control setting out of range."""


class UploadInterruptedError(Exception):
    """The stop event was set (SIGTERM): the upload stopped between two messages."""


@dataclass
class _Partition:
    records: deque[tuple[int, int]] = field(default_factory=deque)  # (offset, payload bytes)
    backlog_bytes: int = 0
    log_start: int = 0  # the last one polled (log starts only move forward)
    last_offset: int = -1  # the highest offset tracked so far
    polled_at: float | None = None
    held_since: float | None = None


@dataclass(frozen=True)
class WindowStats:
    window_bytes: int
    held_back_s: float  # wall time while at least one partition was held back
    backlog_bytes: int  # now, every partition
    backlog_bytes_peak: int  # the most held at once, every partition
    partitions_held: int  # partitions waiting now
    log_start_polls: int


class UploadWindow:
    def __init__(self, window_bytes: int, partitions: int, log_start: Callable[[int], int],
                 clock: Callable[[], float], poll_interval_s: float = POLL_INTERVAL_S_DEFAULT,
                 records_held_max: int = RECORDS_HELD_MAX_DEFAULT) -> None:
        if window_bytes < 1 or poll_interval_s < 0 or records_held_max < 1:
            raise UploadWindowConfigError(
                f"window_bytes {window_bytes} (>= 1), poll_interval_s {poll_interval_s} (>= 0), "
                f"records_held_max {records_held_max} (>= 1)")
        assert partitions >= 1
        self.window_bytes = window_bytes
        self.share_bytes = max(1, window_bytes // partitions)
        self.poll_interval_s = poll_interval_s
        self.records_held_max = records_held_max
        self._log_start = log_start
        self._clock = clock
        self._lock = threading.Lock()
        self._partitions = [_Partition() for _ in range(partitions)]
        self._held_back_s = 0.0  # wall time with at least one partition held, ended waits
        self._held_partitions = 0
        self._any_held_since = 0.0
        self._backlog_bytes = 0
        self._backlog_bytes_peak = 0
        self._log_start_polls = 0

    # --- what the uploader tells it -------------------------------------------------------

    def acked(self, partition: int, offset: int, payload_bytes: int) -> None:
        """The broker holds this client's record of `payload_bytes` at `offset`."""
        assert offset >= 0 and payload_bytes >= 0
        with self._lock:
            state = self._partitions[partition]
            if offset <= state.last_offset or offset < state.log_start:
                return  # counted already (a re-sent record), or folded already
            state.last_offset = offset
            state.records.append((offset, payload_bytes))
            state.backlog_bytes += payload_bytes
            self._backlog_bytes += payload_bytes
            self._backlog_bytes_peak = max(self._backlog_bytes_peak, self._backlog_bytes)

    def wants_size(self, partition: int, offset: int) -> bool:
        """Whether a record acknowledged before a restart, at `offset`, still counts: at or
        above the log start (asked once per partition when never asked yet)."""
        with self._lock:
            polled = self._partitions[partition].polled_at is not None
        if not polled:
            self._poll(partition)
        with self._lock:
            state = self._partitions[partition]
            return offset >= state.log_start and offset > state.last_offset

    # --- admission ------------------------------------------------------------------------

    def admit(self, partition: int) -> float:
        """0.0 when `partition` may produce now; else the seconds to wait before asking again
        (the partition counts as held back from now until it is admitted)."""
        now = self._clock()
        if self._poll_due(partition, now):
            self._poll(partition)
        with self._lock:
            state = self._partitions[partition]
            if self._has_room(state):
                self._unhold(state, now)
                return 0.0
            if state.held_since is None:
                state.held_since = now
                self._held_partitions += 1
                if self._held_partitions == 1:
                    self._any_held_since = now
            due_at = (state.polled_at or now) + self.poll_interval_s
            return min(WAIT_STEP_S_MAX, max(due_at - now, 0.001))

    def wait_for_room(self, partition: int, stop: threading.Event) -> None:
        """Block until `partition` may produce; UploadInterruptedError once `stop` is set."""
        while True:
            if stop.is_set():
                self._release(partition)
                raise UploadInterruptedError(f"stopped while held back on partition {partition}")
            wait_s = self.admit(partition)
            if wait_s == 0.0:
                return
            stop.wait(wait_s)

    def _has_room(self, state: _Partition) -> bool:
        return (state.backlog_bytes <= self.share_bytes
                and len(state.records) < self.records_held_max)

    def _poll_due(self, partition: int, now: float) -> bool:
        with self._lock:
            state = self._partitions[partition]
            near = (state.backlog_bytes > NEAR_SHARE * self.share_bytes
                    or len(state.records) >= self.records_held_max)
            return near and (state.polled_at is None
                             or now - state.polled_at >= self.poll_interval_s)

    def _poll(self, partition: int) -> None:
        log_start = self._log_start(partition)  # may block riding out the broker: no lock
        now = self._clock()
        with self._lock:
            self._log_start_polls += 1
            state = self._partitions[partition]
            state.polled_at = now
            state.log_start = max(state.log_start, log_start)
            while state.records and state.records[0][0] < state.log_start:
                _, payload_bytes = state.records.popleft()
                state.backlog_bytes -= payload_bytes
                self._backlog_bytes -= payload_bytes

    def _release(self, partition: int) -> None:
        """Stop counting `partition` as held (its sender gave up)."""
        now = self._clock()
        with self._lock:
            self._unhold(self._partitions[partition], now)

    def _unhold(self, state: _Partition, now: float) -> None:
        """Under the lock."""
        if state.held_since is None:
            return
        state.held_since = None
        self._held_partitions -= 1
        if self._held_partitions == 0:
            self._held_back_s += now - self._any_held_since

    # --- what it tells -------------------------------------------------------------------

    def backlog_bytes(self, partition: int) -> int:
        with self._lock:
            return self._partitions[partition].backlog_bytes

    def stats(self) -> WindowStats:
        now = self._clock()
        with self._lock:
            ongoing_s = now - self._any_held_since if self._held_partitions else 0.0
            return WindowStats(self.window_bytes, self._held_back_s + ongoing_s,
                               self._backlog_bytes, self._backlog_bytes_peak,
                               self._held_partitions, self._log_start_polls)
