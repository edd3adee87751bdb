"""Committed offsets of consumer groups, kept as records in the internal `__offsets` topic.

Format: partition 0 of `__offsets`; each commit is one record batch (no producer id) holding
one record `str group | str topic | u32 partition | i64 offset`; offset -1 is a tombstone
(the topic was deleted, forget the commit). Because they are ordinary records they will
replicate like data.

Invariant: the in-memory table equals the fold of the log in offset order, latest commit
wins. It is rebuilt by reading the whole topic on start, before the broker listens.

Thread-safety: one lock serialises append-then-update, so two commits of the same key land in
the table in the order they have in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from common.kaska.errors import InvalidRequestError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.record_batch import encode_batch, iter_batches, iter_records
from common.kaska.topic_name import OFFSETS_TOPIC

log = logging.getLogger(__name__)

OFFSETS_PARTITION = 0
TOMBSTONE = -1
GROUP_CHARS_MAX = 255
REBUILD_READ_BYTES = 1024 * 1024

Key = tuple[str, str, int]


def validate_group(group: str) -> str:
    if not group or len(group) > GROUP_CHARS_MAX:
        raise InvalidRequestError(f"group name must hold 1..{GROUP_CHARS_MAX} characters")
    return group


def encode_commit(group: str, topic: str, partition: int, offset: int) -> bytes:
    return BodyWriter().string(group).string(topic).u32(partition).i64(offset).getvalue()


def decode_commit(record: bytes) -> tuple[Key, int]:
    reader = BodyReader(record)
    key = (reader.string("group"), reader.string("topic"), reader.u32("partition"))
    offset = reader.i64("offset")
    reader.finish()
    return key, offset


class CommittedOffsets:
    def __init__(self, storage, append: Callable[[bytes], None] | None = None) -> None:
        """`storage` is the broker's storage Log; the `__offsets` topic is made if missing.
        `append(batch)` stores one commit batch (the broker routes it through replication, so
        it returns once a majority holds it); default: straight into the local partition."""
        self._storage = storage
        self._append_batch = append or (lambda batch: self._partition().append(batch))
        self._lock = threading.Lock()
        self._table: dict[Key, int] = {}

    def load(self) -> int:
        """Create `__offsets` when missing, rebuild the table; the number of records read."""
        if OFFSETS_TOPIC not in self._storage.topics():
            self._storage.create_topic(OFFSETS_TOPIC, 1)
        partition = self._partition()
        offset = partition.log_start_offset
        end = partition.log_end_offset
        records = 0
        with self._lock:
            self._table.clear()
            while offset < end:
                chunk = partition.read_bytes(offset, REBUILD_READ_BYTES, upto_offset=end)
                start = offset
                for header, batch in iter_batches(chunk):
                    for record_offset, value in iter_records(batch, header):
                        if record_offset >= offset:
                            self._apply(*decode_commit(value))
                            records += 1
                    offset = header.next_offset
                assert offset > start, "storage returned no whole batch below the log end"
        log.info("rebuilt %d committed offsets from %d records", len(self._table), records)
        return records

    def _partition(self):
        return self._storage.partition(OFFSETS_TOPIC, OFFSETS_PARTITION)

    def _apply(self, key: Key, offset: int) -> None:
        if offset == TOMBSTONE:
            self._table.pop(key, None)
        else:
            self._table[key] = offset

    def _append(self, key: Key, offset: int) -> None:
        # Caller holds self._lock.
        batch = encode_batch([encode_commit(*key, offset)])
        self._append_batch(batch)
        self._apply(key, offset)

    def absorb(self, batch: bytes) -> None:
        """Apply one `__offsets` batch replicated from the leader (a follower's table stays
        current, so it serves at once if it becomes leader)."""
        with self._lock:
            for header, whole in iter_batches(batch):
                for _offset, value in iter_records(whole, header):
                    self._apply(*decode_commit(value))

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        assert offset >= 0
        with self._lock:
            self._append((group, topic, partition), offset)

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._table.get((group, topic, partition))

    def forget_topic(self, topic: str) -> None:
        """Tombstone every commit of a deleted topic, so a topic re-created under the same
        name does not inherit stale positions."""
        with self._lock:
            for key in [key for key in self._table if key[1] == topic]:
                self._append(key, TOMBSTONE)
