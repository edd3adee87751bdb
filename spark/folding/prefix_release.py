"""Releasing what the stream has folded: each `flights.<cid>` partition's log start moves up to
what a committed micro-batch read (Kafka's DeleteRecords), so the brokers hold a window of the
session, not the session; a client ahead of the window waits (client/upload_window.py).

Only below a committed batch: Spark runs an uncommitted micro-batch again from its start
offsets, which must still be readable. A batch reported folded is released once its commit
file is in the checkpoint (spark/folding/checkpoint_log.py), whichever comes first.

Owns: one daemon thread and its admin connection; the offsets released so far per partition.
A topic that is gone (the session cleaned up) is dropped; any other broker error is logged and
the release retried on the next round (a later batch's release covers an earlier one).

Thread-safety: `offer` from any thread; the rest on the releaser's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from common.kaska.errors import KaskaError, UnknownTopicOrPartitionError
from common.periodic import PeriodicThread
from spark.folding.checkpoint_log import is_committed

log = logging.getLogger(__name__)
RELEASE_INTERVAL_S = 0.25

DeleteRecords = Callable[[str, dict[int, int]], dict[int, int]]


class PrefixReleaser:
    def __init__(self, checkpoint: Path, delete_records: DeleteRecords,
                 stop: threading.Event, interval_s: float = RELEASE_INTERVAL_S) -> None:
        self._checkpoint = Path(checkpoint)
        self._delete_records = delete_records
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._pending: list[tuple[int, dict[str, dict[int, int]]]] = []
        self.released: dict[str, dict[int, int]] = {}
        self.records_released = 0
        self._thread = PeriodicThread("prefix-releaser", interval_s, self.release_committed,
                                      stop=stop)

    def start(self) -> None:
        self._thread.start()

    def offer(self, batch_id: int, end_offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Micro-batch `batch_id` read up to `end_offsets`: release them once it commits."""
        with self._lock:
            self._pending.append((batch_id, {t: dict(o) for t, o in end_offsets.items()}))

    def release_committed(self) -> None:
        """One round: the newest committed pending batch's offsets released."""
        with self._lock:
            committed = [(batch, offsets) for batch, offsets in self._pending
                         if is_committed(self._checkpoint, batch)]
            if not committed:
                return
            newest = max(batch for batch, _ in committed)
            self._pending = [(b, o) for b, o in self._pending if b > newest]
        target = dict(committed)[newest]
        failed = {topic: offsets for topic, offsets in target.items()
                  if not self._release_topic(topic, offsets)}
        if failed:
            with self._lock:
                self._pending.append((newest, failed))

    def _release_topic(self, topic: str, offsets: dict[int, int]) -> bool:
        """Whether the topic's partitions are released up to `offsets` (or the topic is gone)."""
        done = self.released.setdefault(topic, {})
        moving = {p: o for p, o in offsets.items() if o > done.get(p, 0)}
        if not moving:
            return True
        try:
            starts = self._delete_records(topic, moving)
        except UnknownTopicOrPartitionError:
            self.released.pop(topic, None)
            return True
        except KaskaError as error:
            log.warning("releasing %s below %s failed (%s: %s); retried in %.2f s", topic,
                        moving, type(error).__name__, error, self._interval_s)
            return False
        for partition, offset in moving.items():
            self.records_released += max(0, offset - done.get(partition, 0))
            done[partition] = max(offset, starts.get(partition, offset))
        return True
