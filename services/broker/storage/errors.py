"""Storage errors that never travel on the wire as themselves.

Recovery catches CorruptSegmentError, CorruptIndexError and CorruptSnapshotError and repairs
(quarantine, truncate, rebuild, or ignore the snapshot); they only escape from the classes used
directly. PartitionClosedError subclasses UnknownTopicOrPartitionError so the server answers a
request racing a topic deletion with that wire code; StorageFullError subclasses
KaskaStorageError so a write refused for lack of space is answered KAFKA_STORAGE_ERROR (56,
retriable).
"""

from __future__ import annotations

from pathlib import Path

from common.kaska.errors import KaskaError, KaskaStorageError, UnknownTopicOrPartitionError


class StorageError(KaskaError):
    """Base of the broker's storage errors (wire code: unknown server error)."""


class CorruptSegmentError(StorageError):
    """A log file that is not a Kaska segment: too short, no `KASK` magic, unknown format
    version, or a header base offset that disagrees with its file name."""


class CorruptIndexError(StorageError):
    """An offset index file that is torn (size not a multiple of 8) or not strictly
    increasing; recovery rebuilds it from the log."""


class CorruptSnapshotError(StorageError):
    """A producer-state snapshot that is torn, fails its CRC, or names another offset; the
    partition ignores it and rebuilds its producer table from the log."""


class DataDirectoryLockedError(StorageError):
    """Another Log (in this or another process) already owns the data directory."""


class PartitionClosedError(UnknownTopicOrPartitionError):
    """The partition was closed (its topic deleted, or the broker shutting down)."""


class ReplicaOffsetMismatchError(StorageError):
    """A replicated batch (or a restart point) that does not continue this partition's log:
    the follower's log and the leader's disagree on where it ends."""


class StorageFullError(StorageError, KaskaStorageError):
    """The file system refused a write for lack of space (ENOSPC) or quota (EDQUOT). Raised
    before anything of the write became visible; see disk_space.py."""

    path: Path  # the file (or directory) the refused write was for
    errno: int  # errno.ENOSPC or errno.EDQUOT
    reason: str  # the operating system's words for it

    def __init__(self, path: Path, cause: OSError):
        self.path = Path(path)
        self.errno = cause.errno
        self.reason = cause.strerror or str(cause)
        super().__init__(f"storage full: writing {self.path} refused ({self.reason})")
