"""DiskSpace: the broker's one seam for reserving disk blocks, and its record of full-disk
episodes (one per data directory, owned by the `Log`).

Why a reservation: the active segment is a sparse file written through `mmap` (segment.py);
storing into a page for which the file system cannot allocate a block kills the process with
SIGBUS. So no byte goes into the map before its blocks are reserved with `posix_fallocate`
(`reserve`), which reports a full disk as ENOSPC / EDQUOT instead. Files written with `write`
(journal, offset indexes, producer snapshots, quorum and commit checkpoints, topic metadata)
get that error from the write itself; `writing(path)` turns it into the same
`StorageFullError`. Either way the caller has not made anything visible yet and answers
KAFKA_STORAGE_ERROR (retriable); the next write simply tries again, so writes resume by
themselves once space is freed.

Episodes: every refused write is counted (`refusals`). The first refusal after a healthy spell
starts an episode (`episodes`, `full`) and is logged once -- "storage full on DIR: ...;
produce refused until space is freed" -- however many requests are refused during it. It ends
(logged once) when a write succeeds, or a `status()` probe runs, while the file system has at
least `free_bytes_resume` free: that margin keeps partitions that still have reserved room
from ending and restarting the episode on every other request.

Thread-safety: `reserve` and `writing` run under their callers' locks (partition, journal);
the counters change under `_lock`; `full` is one attribute read.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from services.broker.storage.errors import StorageFullError

log = logging.getLogger(__name__)

SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# posix_fallocate on a file system that cannot reserve (glibc emulates most of them itself).
_UNSUPPORTED_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENOSYS})
FREE_BYTES_RESUME_DEFAULT = 1024 * 1024


def fallocate(fd: int, offset: int, nbytes: int) -> None:
    """Reserve real blocks for [offset, offset + nbytes) of `fd`: the one call that does (tests
    replace it to simulate a full disk). Never changes what the file holds."""
    os.posix_fallocate(fd, offset, nbytes)


def is_space_error(exc: OSError) -> bool:
    return exc.errno in SPACE_ERRNOS


class DiskSpace:
    """Reservations and full-disk episodes of the files under one data directory."""

    def __init__(self, directory: Path | str,
                 free_bytes_resume: int = FREE_BYTES_RESUME_DEFAULT) -> None:
        assert free_bytes_resume >= 0
        self.directory = Path(directory)
        self.free_bytes_resume = free_bytes_resume
        self._lock = threading.Lock()
        self._full = False
        self._reserve_supported = True
        self.refusals = 0  # writes refused for lack of space, ever
        self.episodes = 0  # full-disk episodes, ever

    # -- writing ---------------------------------------------------------------------------

    def reserve(self, fd: int, offset: int, nbytes: int, path: Path,
                ahead_bytes: int = 0) -> int:
        """Back [offset, offset + nbytes) of `fd` with real blocks, plus up to `ahead_bytes`
        more when the file system has them (fewer reservations on the hot path); the bytes
        reserved from `offset`. StorageFullError when not even `nbytes` fit."""
        assert nbytes > 0 and ahead_bytes >= 0
        if not self._reserve_supported:
            return nbytes + ahead_bytes
        if ahead_bytes:
            try:
                fallocate(fd, offset, nbytes + ahead_bytes)
                return nbytes + ahead_bytes
            except OSError as exc:
                if self._unsupported(exc):
                    return nbytes + ahead_bytes
                if not is_space_error(exc):
                    raise
                # No room for a whole step: take just what is needed, so the disk fills to
                # the brim before anything is refused.
        with self.writing(path):
            try:
                fallocate(fd, offset, nbytes)
            except OSError as exc:
                if not self._unsupported(exc):
                    raise
        return nbytes

    def _unsupported(self, exc: OSError) -> bool:
        """Whether `exc` says this file system cannot reserve blocks at all; then writes go
        unreserved, as before reservations existed (a full disk may then still SIGBUS)."""
        if exc.errno not in _UNSUPPORTED_ERRNOS:
            return False
        if self._reserve_supported:
            self._reserve_supported = False
            log.warning("%s: the file system cannot reserve blocks (%s); segments are written "
                        "unreserved, so a full disk may kill the broker", self.directory, exc)
        return True

    @contextlib.contextmanager
    def writing(self, path: Path) -> Iterator[None]:
        """Around a write to `path`: ENOSPC / EDQUOT becomes StorageFullError (counted; the
        first of an episode logged). The caller undoes whatever part of the write was done."""
        try:
            yield
        except OSError as exc:
            if not is_space_error(exc):
                raise
            error = StorageFullError(path, exc)
            self.refused(error)
            raise error from exc

    # -- episodes --------------------------------------------------------------------------

    @property
    def full(self) -> bool:
        return self._full

    def refused(self, error: StorageFullError) -> None:
        with self._lock:
            self.refusals += 1
            starting = not self._full
            if starting:
                self._full = True
                self.episodes += 1
        if starting:
            log.warning("storage full on %s: writing %s refused (%s); produce refused until "
                        "space is freed", self.directory, error.path, error.reason)

    def written(self) -> None:
        """A write succeeded: ends the episode when the disk has room again."""
        if self._full:  # one attribute read on the hot path while the disk is healthy
            self._end_if_freed()

    def status(self) -> str:
        """What the broker's heartbeat reports: "" when healthy, else why writes are refused.
        Probes the free space, so an episode ends even when no write comes."""
        if self._full:
            self._end_if_freed()
        return f"storage full on {self.directory}" if self._full else ""

    def _end_if_freed(self) -> None:
        free_bytes = self.free_bytes()
        if free_bytes is None or free_bytes < self.free_bytes_resume:
            return
        with self._lock:
            if not self._full:
                return
            self._full = False
            refusals = self.refusals
        log.warning("storage on %s has room again (%d bytes free); produce resumes (%d writes "
                    "refused in all)", self.directory, free_bytes, refusals)

    def free_bytes(self) -> int | None:
        """Bytes an unprivileged writer may still use on the data directory's file system
        (None when it cannot be read). Also read by the metrics scrape."""
        try:
            stats = os.statvfs(self.directory)
        except OSError as exc:  # the directory went away (a test, a closed log): say nothing
            log.debug("statvfs %s: %s", self.directory, exc)
            return None
        return stats.f_bavail * stats.f_frsize
