"""Log: every topic of one broker in one data directory.

Layout (the Log owns the whole data directory; other broker state belongs elsewhere or under a
name starting with `@`, which no topic name can hold):

    DATA/@lock                 flock()ed while a Log has the directory open
    DATA/@staging/<uuid>/      a topic being created; renamed to DATA/<topic> when complete
    DATA/@deleted/<topic>.<ns>/ a topic being deleted; renamed away first, removed after
    DATA/<topic>/topic.json    {"format": 1, "name": <topic>, "partitions": N}
    DATA/<topic>/<p>/          PartitionLog directory of partition p, 0 <= p < N, for every p
                               this Log holds (`holds`, below)

Partitions held: a broker running several replication groups has one Log per group, and each
holds only the partitions its group replicates (`holds(topic, partition)`, given at construction,
a pure function of the names: replication/placement.py). A topic has all its N partitions in
its metadata and `topics()`, but the directories and PartitionLogs of the partitions held only;
`partition()` of another one is UnknownTopicOrPartitionError. Without `holds`, every partition.

Invariants: a topic exists exactly when `DATA/<topic>/topic.json` does. Creation and deletion
are single directory renames (fsynced), so a crash leaves a topic whole or absent; `@staging`
and `@deleted` are emptied on open. Topic names are checked by `validate_topic_name`
(1..249 characters of `[A-Za-z0-9._-]`, not `.` or `..`) before any path is built, so no name
can reach outside DATA.

Recovery on open: every topic directory with valid metadata is opened and every partition
recovered (see PartitionLog) before the Log is returned; directories without valid metadata
are logged and left alone.

Full disk: the Log owns the `DiskSpace` of its directory (`space`: reservations, the count and
log of full-disk episodes, the heartbeat's status), shared by every partition. A topic the
file system has no room for is not created (StorageFullError, nothing left behind); deleting
needs no room.

Deleting is a rename into @deleted under the lock; closing the partitions and unlinking the
files run on the Log's Reaper thread (reaper.py), never on the caller's.

Thread-safety: a lock serialises create/delete/close; `partition` and `topics` are lock-free
reads of a dict that is replaced, never mutated, so request threads never wait on an admin
operation.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from common.kaska.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from common.kaska.topic_name import validate_topic_name
from services.broker.storage.config import LogConfig
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.errors import (
    DataDirectoryLockedError,
    PartitionClosedError,
    StorageFullError,
)
from services.broker.storage.partition import PartitionLog, fsync_directory, monotonic_ms
from services.broker.storage.reaper import Reaper

log = logging.getLogger(__name__)

PARTITIONS_MAX = 1024
TOPIC_FORMAT_VERSION = 1
METADATA_FILE = "topic.json"
LOCK_FILE = "@lock"
STAGING_DIR = "@staging"
DELETED_DIR = "@deleted"


class Log:
    """The topics of one broker; opening it recovers every partition."""

    def __init__(self, data_dir: Path | str, config: LogConfig | None = None,
                 clock_ms: Callable[[], int] = monotonic_ms,
                 holds: Callable[[str, int], bool] | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.config = config or LogConfig()
        # A topic's own settings (cluster/topic_configs.py), given to its partitions as they
        # open; the broker's until the broker sets its resolver.
        self.topic_config: Callable[[str], LogConfig] = lambda _name: self.config
        self._clock_ms = clock_ms
        self._holds = holds or _every_partition
        self._lock = threading.Lock()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.space = DiskSpace(self.data_dir)
        self._lock_fd = _lock_directory(self.data_dir)
        self._closed = False
        # Partition p of a topic at position p; None for a partition this Log does not hold.
        self._topics: dict[str, tuple[PartitionLog | None, ...]] = {}
        self._reaper = Reaper(f"reaper-{self.data_dir.name}")
        try:
            self._remove_unfinished()
            self._topics = self._open_topics()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- topics --------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Topic name → partition count."""
        return {name: len(partitions) for name, partitions in self._topics.items()}

    def partition(self, name: str, partition: int) -> PartitionLog:
        partitions = self._topics.get(name)
        if partitions is None or not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartitionError(f"no partition {partition} of topic {name!r}")
        found = partitions[partition]
        if found is None:
            raise UnknownTopicOrPartitionError(f"partition {partition} of topic {name!r} is "
                                               "replicated by another replication group")
        return found

    def held(self, name: str) -> list[int]:
        """The partitions of topic `name` this Log holds (none for an unknown topic)."""
        return [p for p, found in enumerate(self._topics.get(name, ())) if found is not None]

    def holds(self, name: str, partition: int) -> bool:
        """Whether this Log holds (or would hold) that partition of a topic of that name."""
        return self._holds(name, partition)

    def create_topic(self, name: str, partitions: int) -> None:
        validate_topic_name(name)
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidPartitionsError(f"{partitions} partitions; 1..{PARTITIONS_MAX} allowed")
        with self._lock:
            self._check_open()
            if name in self._topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            target = self._topic_dir(name)
            if target.exists():
                self._discard(target)  # a directory without valid metadata: never a topic
            staging = self.data_dir / STAGING_DIR / uuid.uuid4().hex
            try:
                with self.space.writing(staging):
                    staging.mkdir(parents=True)
                    _write_metadata(staging, name, partitions, self._held_of(name, partitions))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)  # half made: its blocks back now
                raise
            os.rename(staging, target)
            fsync_directory(self.data_dir)
            try:
                opened = self._open_partitions(target, partitions)
            except StorageFullError:
                # No room for the partitions' first segments: no topic rather than half one.
                _remove_in_place(target)
                raise
            self._topics = {**self._topics, name: opened}
            # Settings that changed while the partitions opened reach them now: whoever changed
            # them looked for the partitions before they were published here.
            config = self.topic_config(name)
            for partition in opened:
                if partition is not None and partition.config != config:
                    partition.reconfigure(config)
        log.info("created topic %r with %d partition(s)", name, partitions)

    def delete_topic(self, name: str) -> None:
        """Gone at once for new requests: a rename into @deleted, and the reaper closes the
        partitions (in-flight appends finish first) and removes the files later; in-flight
        sends keep their (unlinked) files until done. Without room for @deleted the topic is
        closed and removed in place, here."""
        validate_topic_name(name)
        with self._lock:
            self._check_open()
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"no topic {name!r}")
            topics = dict(self._topics)
            partitions = topics.pop(name)
            self._topics = topics
            try:
                with self.space.writing(self.data_dir / DELETED_DIR):
                    trash = self._discard_dir(name)
            except StorageFullError:
                trash = None  # no room even for @deleted: delete in place (below)
            if trash is not None:
                os.rename(self._topic_dir(name), trash)
                fsync_directory(self.data_dir)
                # Closing (it waits for appends in flight) and unlinking (GBs take seconds)
                # happen on the reaper's thread: this one may be answering a follower's fetch.
                self._reaper.discard([p for p in partitions if p is not None], trash)
        if trash is None:
            for partition in partitions:
                if partition is not None:
                    partition.close()
            _remove_in_place(self._topic_dir(name))
        log.info("deleted topic %r", name)

    # -- whole-broker operations ---------------------------------------------------------

    def apply_retention(self, now_ms: int,
                        safe_offset: Callable[[str, int], int] | None = None) -> int:
        """Retention over every partition (see PartitionLog.apply_retention); segments
        deleted. `safe_offset(topic, partition)`: deletion stays below it (the replica manager
        passes the high watermark); None: no such bound. A partition closed by a racing topic
        deletion is skipped."""
        deleted = 0
        for name, partitions in self._topics.items():
            for p, partition in enumerate(partitions):
                if partition is None:
                    continue
                try:
                    upto = None if safe_offset is None else safe_offset(name, p)
                    deleted += partition.apply_retention(now_ms, upto)
                except PartitionClosedError:
                    continue
        return deleted

    def flush(self) -> None:
        for partitions in self._topics.values():
            for partition in partitions:
                if partition is not None:
                    partition.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            topics, self._topics = self._topics, {}
            for partitions in topics.values():
                for partition in partitions:
                    if partition is not None:
                        partition.close()
            self._reaper.close()
            os.close(self._lock_fd)

    def wait_deletes_done(self, timeout_s: float) -> bool:
        """Until every deleted topic's files are gone (see Reaper.wait_idle)."""
        return self._reaper.wait_idle(timeout_s)

    # -- internals -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UnknownTopicOrPartitionError("the log is closed")

    def _topic_dir(self, name: str) -> Path:
        path = self.data_dir / name
        assert path.parent == self.data_dir and validate_topic_name(name) == path.name
        return path

    def _discard_dir(self, name: str) -> Path:
        trash = self.data_dir / DELETED_DIR
        trash.mkdir(exist_ok=True)
        return trash / f"{name}.{time.time_ns()}"

    def _discard(self, path: Path) -> None:
        log.warning("%s: leftover directory without topic metadata; removed", path)
        trash = self._discard_dir(path.name)
        os.rename(path, trash)
        shutil.rmtree(trash)

    def _remove_unfinished(self) -> None:
        for name in (STAGING_DIR, DELETED_DIR):
            path = self.data_dir / name
            if path.exists():
                shutil.rmtree(path)

    def _held_of(self, name: str, partitions: int) -> list[int]:
        return [p for p in range(partitions) if self._holds(name, p)]

    def _open_topics(self) -> dict[str, tuple[PartitionLog | None, ...]]:
        topics: dict[str, tuple[PartitionLog | None, ...]] = {}
        for path in sorted(self.data_dir.iterdir()):
            if path.name.startswith("@"):
                continue
            partitions = _read_metadata(path)
            if partitions is None:
                continue
            topics[path.name] = self._open_partitions(path, partitions)
        return topics

    def _open_partitions(self, topic_dir: Path, partitions: int
                         ) -> tuple[PartitionLog | None, ...]:
        opened: list[PartitionLog | None] = []
        try:
            for p in range(partitions):
                opened.append(PartitionLog(topic_dir / str(p),
                                           self.topic_config(topic_dir.name), self._clock_ms,
                                           self.space)
                              if self._holds(topic_dir.name, p) else None)
        except BaseException:
            for partition in opened:
                if partition is not None:
                    partition.close()
            raise
        return tuple(opened)


def _lock_directory(data_dir: Path) -> int:
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirectoryLockedError(f"{data_dir} is in use by another broker") from None
    return fd


def _remove_in_place(topic_dir: Path) -> None:
    """Delete a topic directory where it is (no room to rename it into @deleted): its metadata
    first, so a crash part-way leaves a directory that is no topic (ignored on open, discarded
    by a later create of that name)."""
    (topic_dir / METADATA_FILE).unlink(missing_ok=True)
    fsync_directory(topic_dir)
    shutil.rmtree(topic_dir)


def _every_partition(_name: str, _partition: int) -> bool:
    return True


def _write_metadata(topic_dir: Path, name: str, partitions: int, held: list[int]) -> None:
    body = json.dumps({"format": TOPIC_FORMAT_VERSION, "name": name, "partitions": partitions})
    path = topic_dir / METADATA_FILE
    with open(path, "w", encoding="utf-8") as out:
        out.write(body)
        out.flush()
        os.fsync(out.fileno())
    for p in held:
        (topic_dir / str(p)).mkdir()
    fsync_directory(topic_dir)


def _read_metadata(path: Path) -> int | None:
    """The partition count of the topic directory `path`, None (logged) when it is not one."""
    if not path.is_dir():
        log.warning("%s: not a topic directory; ignored", path)
        return None
    try:
        validate_topic_name(path.name)
        meta = json.loads((path / METADATA_FILE).read_text(encoding="utf-8"))
    except (InvalidTopicError, OSError, ValueError) as exc:
        log.warning("%s: not a topic (%s); ignored", path, exc)
        return None
    partitions = meta.get("partitions") if isinstance(meta, dict) else None
    if (not isinstance(meta, dict) or meta.get("format") != TOPIC_FORMAT_VERSION
            or meta.get("name") != path.name or not isinstance(partitions, int)
            or not 1 <= partitions <= PARTITIONS_MAX):
        log.warning("%s: bad %s %r; ignored", path, METADATA_FILE, meta)
        return None
    return partitions
