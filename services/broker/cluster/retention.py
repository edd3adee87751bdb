"""The retention thread: every `interval_ms`, ask each partition to drop the whole segments
that are past its size or age limit, never at or above its safe offset (the high watermark:
a follower may still need those bytes).

`__offsets` is never trimmed by size or age: its records are the committed offsets
themselves. It is compacted instead (offsets.py): given `compactable_below`, the segments
wholly below the latest snapshot batch are deleted, once that batch is committed (below the
safe offset) -- an uncommitted snapshot could still be truncated away by a new leader, and the
segments it superseded with it. Without `compactable_below` (and for any other internal
topic) it is left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.topic_name import OFFSETS_TOPIC, is_internal
from common.periodic import PeriodicThread
from services.broker.cluster.committed_offsets import OFFSETS_PARTITION
from services.broker.storage.errors import StorageFullError

log = logging.getLogger(__name__)


class RetentionThread:
    def __init__(self, storage, interval_ms: int,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 safe_offset: Callable[[str, int], int] | None = None,
                 compactable_below: Callable[[], int] | None = None) -> None:
        """`safe_offset(topic, partition)`: deletion stays below it (the high watermark); None:
        no bound. `compactable_below()`: CommittedOffsets.compactable_below, which lets the
        thread compact `__offsets`; None: `__offsets` is left alone."""
        assert interval_ms > 0
        self._storage = storage
        self._safe_offset = safe_offset
        self._compactable_below = compactable_below
        self._clock_ms = clock_ms
        self._thread = PeriodicThread("kaska-retention", interval_ms / 1000, self.run_once)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def run_once(self) -> int:
        """One pass over every partition; the number of segments deleted."""
        now_ms = self._clock_ms()
        deleted = 0
        for topic in list(self._storage.topics()):
            for p in self._storage.held(topic):
                try:
                    deleted += self._trim(topic, p, now_ms)
                except UnknownTopicOrPartitionError:
                    break  # deleted while we walked the list
                except StorageFullError:
                    # No room for the producer snapshot that must precede the deletion
                    # (counted and logged by the DiskSpace); the next pass tries again.
                    continue
                except OSError:
                    # A disk error on one partition must not stop retention of the others.
                    log.exception("retention of %s/%d failed", topic, p)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return deleted

    def _trim(self, topic: str, p: int, now_ms: int) -> int:
        if topic == OFFSETS_TOPIC:
            return self._compact_offsets(p)
        if is_internal(topic):
            return 0
        upto = None if self._safe_offset is None else self._safe_offset(topic, p)
        return self._storage.partition(topic, p).apply_retention(now_ms, upto)

    def _compact_offsets(self, p: int) -> int:
        if self._compactable_below is None or p != OFFSETS_PARTITION:
            return 0
        below = self._compactable_below()
        if self._safe_offset is not None and below >= self._safe_offset(OFFSETS_TOPIC, p):
            return 0  # the snapshot batch at `below` is not committed yet
        return self._storage.partition(OFFSETS_TOPIC, p).delete_segments_below(below)
