"""The retention thread: every `interval_ms`, ask each partition to drop the whole segments
that are past its size or age limit. `__offsets` is left alone: its records are the committed
offsets themselves and deleting old ones would lose commits (it is not compacted yet)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.topic_name import is_internal

log = logging.getLogger(__name__)


class RetentionThread:
    def __init__(self, storage, interval_ms: int,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 safe_offset: Callable[[str, int], int] | None = None) -> None:
        """`safe_offset(topic, partition)`: deletion stays below it (the high watermark)."""
        assert interval_ms > 0
        self._storage = storage
        self._safe_offset = safe_offset
        self._interval_s = interval_ms / 1000
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kaska-retention", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.run_once()

    def run_once(self) -> int:
        """One pass over every partition; the number of segments deleted."""
        now_ms = self._clock_ms()
        deleted = 0
        for topic, partitions in self._storage.topics().items():
            if is_internal(topic):
                continue
            for p in range(partitions):
                try:
                    upto = None if self._safe_offset is None else self._safe_offset(topic, p)
                    deleted += self._storage.partition(topic, p).apply_retention(now_ms, upto)
                except UnknownTopicOrPartitionError:
                    break  # deleted while we walked the list
                except OSError:
                    # A disk error on one partition must not stop retention of the others.
                    log.exception("retention of %s/%d failed", topic, p)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return deleted
