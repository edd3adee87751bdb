"""Where the query service keeps its progress over the `sessions` topic, and how it commits.

Owns: the two progress stores (the consumer group's committed offsets on the broker, the
default; or a local `CheckpointStore` with `--checkpoint-dir`) and `commit_progress`, which
saves a `SessionProgress`'s commit position of every partition that moved.

Invariants: a position is saved only when `SessionProgress` says every record below it is
finished; a failed save is logged and retried at the next commit (the position saved stays
the last one that succeeded, so a restart redoes at most what was not saved).

Threads: the service's main loop alone loads and saves (stores are not thread-safe).
"""

from __future__ import annotations

import logging
from pathlib import Path

from common.checkpoint import CheckpointError, CheckpointStore
from common.flights.session_records import SESSIONS_TOPIC
from common.kaska import Consumer
from common.kaska.errors import KaskaError
from spark.service.session_progress import SessionProgress

# The service's one logger, as before the split: its log lines read the same.
log = logging.getLogger("spark.service")
PROGRESS_STORE_NAME = "sessions-progress"


class BrokerProgressStore:
    """Committed offsets of the consumer's group (`query-service`, or `query-service-cleanup`)
    on the broker (the `__offsets` topic)."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def load(self, partition: int) -> int | None:
        return self._consumer.committed(SESSIONS_TOPIC, partition)

    def save(self, partition: int, offset: int) -> None:
        self._consumer.commit(SESSIONS_TOPIC, offset, partition)


class FileProgressStore:
    """`{"<partition>": offset}` in a CheckpointStore (JSON payload, atomic versioned saves)."""

    def __init__(self, directory: Path, name: str = PROGRESS_STORE_NAME) -> None:
        self._store = CheckpointStore(directory, name=name)
        self._offsets: dict[str, int] = self._store.load_json() or {}

    def load(self, partition: int) -> int | None:
        return self._offsets.get(str(partition))

    def save(self, partition: int, offset: int) -> None:
        self._offsets[str(partition)] = offset
        self._store.save_json(self._offsets)


def commit_progress(store, progress: SessionProgress, committed: dict[int, int], what: str) -> None:
    """Save `progress`'s commit position of every partition that moved; `committed` holds the
    positions saved."""
    for partition in progress.partitions():
        position = progress.commit_position(partition)
        if position == committed.get(partition):
            continue
        try:
            store.save(partition, position)
        except (KaskaError, CheckpointError, OSError) as error:
            log.warning("committing %s/%d at %d%s failed (%s); will retry", SESSIONS_TOPIC,
                        partition, position, what, error)
            return
        committed[partition] = position
        log.info("committed %s/%d at offset %d%s", SESSIONS_TOPIC, partition, position, what)
