"""Reaper: removes deleted topics off the threads that keep the cluster alive.

A topic delete is a rename into `DATA/@deleted/` (one fsynced directory operation, taken under
the Log's lock and, in a cluster, under the replication node's lock, inside a follower's fetch
or on the replication loop). Everything that can take long is handed here instead: closing its
partitions (a close waits for an append in flight on the partition, e.g. a produce still
receiving its body) and unlinking its files (freeing many GB of extents takes seconds). Issue
21: a 14 GB delete done inline stalled a leader long enough for its followers to elect another.

Invariants: a job's partitions are closed before its directory is removed (their maps and
descriptors point into it); a removal that fails is logged and counted, never retried (the next
open of the Log empties `@deleted` whatever is left). `close()` stops taking jobs, lets the one
running finish, and closes the partitions of the rest without removing their directories: a
broker's shutdown never waits for a big unlink, and the next open removes them.

Thread-safety: `discard` may be called from any thread; one worker thread runs the jobs in
order; counters are read lock-free.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

from services.broker.storage.partition import PartitionLog

log = logging.getLogger(__name__)

CLOSE_JOIN_S = 30.0  # a running removal's patience at shutdown; after it, the next open cleans


class Reaper:
    def __init__(self, name: str = "reaper") -> None:
        self._jobs: queue.SimpleQueue[tuple[Sequence[PartitionLog], Path] | None] = \
            queue.SimpleQueue()
        self._closing = threading.Event()
        self.removed = 0  # directories removed
        self.failed = 0  # removals that failed (left for the next open)
        self._idle = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def discard(self, partitions: Sequence[PartitionLog], directory: Path) -> None:
        """Close `partitions`, then remove `directory`, later, on the reaper's thread."""
        with self._idle:
            self._pending += 1
        self._jobs.put((tuple(partitions), directory))

    def wait_idle(self, timeout_s: float) -> bool:
        """Until every job handed in so far is done (tests, and callers that need the space
        back now); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self) -> None:
        self._closing.set()
        self._jobs.put(None)
        self._thread.join(CLOSE_JOIN_S)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            partitions, directory = job
            try:
                self._close_all(partitions)
                if not self._closing.is_set():
                    self._remove(directory)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _close_all(self, partitions: Sequence[PartitionLog]) -> None:
        for partition in partitions:
            try:
                partition.close()
            except OSError as exc:  # an unmap or close of a file already unlinked
                log.warning("closing a deleted partition %s: %s", partition.directory, exc)

    def _remove(self, directory: Path) -> None:
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            self.failed += 1
            log.error("could not remove deleted topic directory %s (the next start removes "
                      "what is left): %s", directory, exc)
            return
        self.removed += 1
        log.info("removed %s", directory)
