"""Committed offsets of consumer groups, kept as records in the internal `__offsets` topic.

Format: partition 0 of `__offsets`, ordinary record batches (no producer id), so they
replicate like data. Two kinds of batch:
- a commit batch: one record `str group | str topic | u32 partition | i64 offset` (the codec's
  `str` is `u16 length | UTF-8`); offset -1 is a tombstone (the topic was deleted, forget the
  commit);
- a snapshot batch: first a marker record, then one commit record per live commit. The marker
  has the shape of a commit record so that every reader decodes it alike:
  `str "" | str "@snapshot" | u32 SNAPSHOT_FORMAT_VERSION | i64 live commits that follow`.
  No real commit can look like it (group names are 1..255 characters, topic names never hold
  `@`). It means: the table is exactly the commits in this batch.

A topic's own settings share the table (cluster/topic_configs.py): keys of the group "" (which
no consumer group can have), `("", topic, setting number) -> value + 1`, written by
`set_topic_configs`, read by `topic_configs`, dropped by `forget_topic` with the topic's
commits, and left out of `all_committed`. Whenever such keys change (a write here, a batch
absorbed, a rebuild), `on_topic_configs(topics)` is called with the topics concerned, outside
the lock.

Offsets stay dense (no Kafka-style compaction that leaves holes): instead, once the commits
since the last snapshot exceed max(SNAPSHOT_COMMITS_MIN, 2 x live keys), the leader appends a
snapshot batch, and everything below the latest snapshot batch is superseded by it. Retention
(retention.py) then deletes the whole segments below it (`compactable_below`), never the
segment holding it, and only once the snapshot batch is committed (below the high watermark).
After a snapshot the active segment is rolled when it holds over ROLL_BYTES_MIN, so those
segments become whole. A snapshot larger than `batch_bytes_max` is not written (logged): the
topic then grows until the live keys fit again.

Invariant: the in-memory table equals the fold of the log in offset order -- latest commit
wins, a snapshot batch resets the table to its records -- and `snapshot_offset` is the base
offset of the latest snapshot batch folded (None before the first). It is rebuilt by reading
the topic from its log start (`load`): on start before the broker listens, after an election
and after a follower's truncation. A follower keeps it current with `absorb`.

Thread-safety: one lock serialises append-then-update, so two commits of the same key land in
the table in the order they have in the log; `compactable_below` reads one attribute without
it (a commit holds the lock while replication acknowledges it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from common.kaska.errors import InvalidRequestError, KaskaError, OffsetOutOfRangeError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.record_batch import (
    BatchHeader,
    encode_batch,
    iter_batches,
    iter_records,
    parse_header,
)
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.storage.errors import StorageFullError
from services.broker.storage.partition import AppendResult, PartitionLog

log = logging.getLogger(__name__)

OFFSETS_PARTITION = 0
TOMBSTONE = -1
GROUP_CHARS_MAX = 255
REBUILD_READ_BYTES = 1024 * 1024
SNAPSHOT_GROUP = ""
CONFIG_GROUP = ""  # topic settings (topic_configs.py); their topics are real topic names
SNAPSHOT_TOPIC = "@snapshot"
SNAPSHOT_FORMAT_VERSION = 1
SNAPSHOT_COMMITS_MIN = 1000
ROLL_BYTES_MIN = 1024 * 1024

Key = tuple[str, str, int]


class OffsetsSnapshotError(KaskaError):
    """A snapshot batch of `__offsets` this broker cannot read (unknown format version, or a
    marker whose count disagrees with the batch): refusing beats silently losing commits."""


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


def encode_snapshot(table: dict[Key, int]) -> bytes:
    """One snapshot batch holding every commit of `table`."""
    marker = encode_commit(SNAPSHOT_GROUP, SNAPSHOT_TOPIC, SNAPSHOT_FORMAT_VERSION, len(table))
    return encode_batch([marker, *(encode_commit(*key, offset)
                                   for key, offset in table.items())])


def is_snapshot_marker(key: Key) -> bool:
    return key[0] == SNAPSHOT_GROUP and key[1] == SNAPSHOT_TOPIC


class CommittedOffsets:
    def __init__(self, storage, append: Callable[[bytes], object] | None = None, *,
                 snapshot_commits_min: int = SNAPSHOT_COMMITS_MIN,
                 roll_bytes_min: int = ROLL_BYTES_MIN) -> None:
        """`storage` is the broker's storage Log; the `__offsets` topic is made if missing.
        `append(batch)` stores one batch (the broker routes it through replication, so it
        returns once a majority holds it); default: straight into the local partition. It may
        return the AppendResult; otherwise a snapshot batch's offset is found by reading the
        log back."""
        assert snapshot_commits_min >= 1
        self._storage = storage
        self._append_batch = append or (lambda batch: self._partition().append(batch))
        self._snapshot_commits_min = snapshot_commits_min
        self._roll_bytes_min = roll_bytes_min
        self._lock = threading.Lock()
        self._table: dict[Key, int] = {}
        self._snapshot_offset: int | None = None
        self._commits_since_snapshot = 0
        self._configs_touched: set[str] = set()  # topics whose settings changed, unreported
        self.on_topic_configs: Callable[[set[str]], None] = lambda _topics: None

    # -- rebuilding and following ------------------------------------------------------------

    def load(self) -> int:
        """Create `__offsets` when missing, rebuild the table from the log start; the number
        of commit records read."""
        if OFFSETS_TOPIC not in self._storage.topics():
            self._storage.create_topic(OFFSETS_TOPIC, 1)
        partition = self._partition()
        with self._lock:
            self._configs_touched.update(self._config_topics_locked())
            while True:
                try:
                    records = self._rebuild_locked(partition)
                    break
                except OffsetOutOfRangeError:
                    # Compaction deleted segments under us: they were superseded by a snapshot
                    # further on, so reading again from the new start gives the same table.
                    log.info("__offsets log start moved during the rebuild; reading again")
            self._configs_touched.update(self._config_topics_locked())
        log.info("rebuilt %d committed offsets from %d records (latest snapshot at %s)",
                 len(self._table), records, self._snapshot_offset)
        self._report_configs()
        return records

    def _config_topics_locked(self) -> set[str]:
        return {key[1] for key in self._table if key[0] == CONFIG_GROUP}

    def _report_configs(self) -> None:
        with self._lock:
            touched, self._configs_touched = self._configs_touched, set()
        if touched:
            self.on_topic_configs(touched)

    def _rebuild_locked(self, partition: PartitionLog) -> int:
        self._table.clear()
        self._snapshot_offset = None
        self._commits_since_snapshot = 0
        offset = partition.log_start_offset
        end = partition.log_end_offset
        records = 0
        while offset < end:
            chunk = partition.read_bytes(offset, REBUILD_READ_BYTES, upto_offset=end)
            start = offset
            for header, batch in iter_batches(chunk):
                records += self._fold_locked(header, batch)
                offset = header.next_offset
            assert offset > start, "storage returned no whole batch below the log end"
        return records

    def absorb(self, batch: bytes) -> None:
        """Apply `__offsets` batches replicated from the leader, already in the local log (a
        follower's table stays current, so it serves at once if it becomes leader)."""
        snapshot_seen = False
        with self._lock:
            for header, whole in iter_batches(batch):
                self._fold_locked(header, whole)
                snapshot_seen = snapshot_seen or self._snapshot_offset == header.base_offset
        if snapshot_seen:
            self._maybe_roll()
        self._report_configs()

    def _fold_locked(self, header: BatchHeader, batch: memoryview) -> int:
        """Fold one batch of the log into the table; the commit records it held."""
        commits = [decode_commit(value) for _offset, value in iter_records(batch, header)]
        (first_key, first_offset), rest = commits[0], commits[1:]
        if is_snapshot_marker(first_key):
            _check_marker(first_key, first_offset, len(rest), header.base_offset)
            self._table.clear()
            self._snapshot_offset = header.base_offset
            self._commits_since_snapshot = 0
            commits = rest
        else:
            self._commits_since_snapshot += len(commits)
        for key, offset in commits:
            self._apply(key, offset)
        return len(commits)

    def _partition(self) -> PartitionLog:
        return self._storage.partition(OFFSETS_TOPIC, OFFSETS_PARTITION)

    def _apply(self, key: Key, offset: int) -> None:
        if key[0] == CONFIG_GROUP:
            self._configs_touched.add(key[1])
        if offset == TOMBSTONE:
            self._table.pop(key, None)
        else:
            self._table[key] = offset

    # -- committing --------------------------------------------------------------------------

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        assert offset >= 0
        with self._lock:
            self._append_locked((group, topic, partition), offset)
            self._maybe_snapshot_locked()

    def forget_topic(self, topic: str) -> None:
        """Tombstone every commit of a deleted topic, so a topic re-created under the same
        name does not inherit stale positions."""
        with self._lock:
            for key in [key for key in self._table if key[1] == topic]:
                self._append_locked(key, TOMBSTONE)
            self._maybe_snapshot_locked()
        self._report_configs()

    def set_topic_configs(self, topic: str, values: dict[int, int | None]) -> None:
        """Store a topic's settings in one batch (one replicated append): number -> stored
        value, None to drop the key (only written when the key is there)."""
        with self._lock:
            changes = [((CONFIG_GROUP, topic, number), TOMBSTONE if value is None else value)
                       for number, value in sorted(values.items())
                       if value is not None or (CONFIG_GROUP, topic, number) in self._table]
            if changes:
                assert all(offset >= 0 or offset == TOMBSTONE for _key, offset in changes)
                self._append_batch(encode_batch([encode_commit(*key, offset)
                                                 for key, offset in changes]))
                for key, offset in changes:
                    self._apply(key, offset)
                self._commits_since_snapshot += len(changes)
                self._maybe_snapshot_locked()
        self._report_configs()

    def _append_locked(self, key: Key, offset: int) -> None:
        self._append_batch(encode_batch([encode_commit(*key, offset)]))
        self._apply(key, offset)
        self._commits_since_snapshot += 1

    def _maybe_snapshot_locked(self) -> None:
        if self._commits_since_snapshot <= max(self._snapshot_commits_min, 2 * len(self._table)):
            return
        batch = encode_snapshot(self._table)
        batch_bytes_max = self._storage.config.batch_bytes_max
        if len(batch) > batch_bytes_max:
            log.warning("__offsets snapshot of %d commits needs %d bytes, over batch_bytes_max "
                        "%d; not written, the topic keeps growing", len(self._table),
                        len(batch), batch_bytes_max)
            self._commits_since_snapshot = 0  # warn again only after as many commits
            return
        try:
            self._snapshot_offset = self._append_snapshot(batch)
        except KaskaError as exc:
            # The commit itself is stored; the snapshot is tried again with the next one.
            log.warning("__offsets snapshot not appended: %s", exc)
            return
        self._commits_since_snapshot = 0
        self._maybe_roll()

    def _append_snapshot(self, batch: bytes) -> int | None:
        """Append a snapshot batch; its base offset, or the previous snapshot's when it cannot
        be told for sure (compaction then waits for the next snapshot, never deletes a commit
        the table still needs)."""
        partition = self._partition()
        expected = partition.log_end_offset  # only this object appends here, under its lock
        result = self._append_batch(batch)
        if isinstance(result, AppendResult):
            return result.base_offset
        if _holds_batch_at(partition, expected, batch):
            return expected
        log.warning("__offsets snapshot batch not found at offset %d; compaction waits for the "
                    "next snapshot", expected)
        return self._snapshot_offset

    def _maybe_roll(self) -> None:
        partition = self._partition()
        if partition.active_segment_bytes > self._roll_bytes_min:
            try:
                partition.roll()
            except StorageFullError:
                # Only compaction waits for the roll (counted and logged by the DiskSpace);
                # the commit or batch that led here is stored. Tried after the next snapshot.
                return

    # -- reading -----------------------------------------------------------------------------

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._table.get((group, topic, partition))

    def all_committed(self) -> dict[Key, int]:
        """A copy of the consumer groups' commits (the table without topic settings)."""
        with self._lock:
            return {key: offset for key, offset in self._table.items()
                    if key[0] != CONFIG_GROUP}

    def config_topics(self) -> set[str]:
        """The topics with stored settings."""
        with self._lock:
            return self._config_topics_locked()

    def topic_configs(self, topic: str) -> dict[int, int]:
        """A topic's stored settings: setting number -> stored value (topic_configs.py)."""
        with self._lock:
            return {key[2]: offset for key, offset in self._table.items()
                    if key[0] == CONFIG_GROUP and key[1] == topic}

    @property
    def snapshot_offset(self) -> int | None:
        """Base offset of the latest snapshot batch folded into the table; None before one."""
        return self._snapshot_offset

    def compactable_below(self) -> int:
        """Every `__offsets` offset below this is superseded by the latest snapshot batch (0
        before the first one). Deleting below it is safe only once that batch is committed:
        the caller also bounds it by the high watermark."""
        snapshot_offset = self._snapshot_offset  # one attribute read, no lock (see above)
        return 0 if snapshot_offset is None else snapshot_offset


def _holds_batch_at(partition: PartitionLog, offset: int, batch: bytes) -> bool:
    """Whether the log's batch at `offset` is `batch` (the CRC covers every record)."""
    try:
        data = partition.read_bytes(offset, 1)
    except OffsetOutOfRangeError:
        return False  # truncated meanwhile
    if not data:
        return False
    stored, ours = parse_header(data), parse_header(batch)
    return (stored.base_offset, stored.crc, stored.record_count) == (
        offset, ours.crc, ours.record_count)


def _check_marker(key: Key, count: int, commits: int, base_offset: int) -> None:
    if key[2] != SNAPSHOT_FORMAT_VERSION:
        raise OffsetsSnapshotError(f"__offsets snapshot at offset {base_offset} has format "
                                   f"version {key[2]}; this broker reads "
                                   f"{SNAPSHOT_FORMAT_VERSION}")
    if count != commits:
        raise OffsetsSnapshotError(f"__offsets snapshot at offset {base_offset} announces "
                                   f"{count} commits and holds {commits}")
