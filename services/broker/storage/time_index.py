"""TimeIndex: the sparse timestamp -> offset index of one log segment (Kafka's TimeIndex,
`.timeindex`), for ListOffsets by timestamp.

File format (`%020d.timeindex`, named like its segment by base offset): back-to-back 12-byte
big-endian entries `i64 timestamp_ms | u32 relative_offset`. An entry (T, o) says: the largest
batch timestamp of the segment up to the batch at base offset o is T, and o is the first batch
that reached it. A batch's timestamp is its header's `timestamp_ms`: a Kaska batch's timestamp,
a Kafka batch's first record's (segment.py says why not the batch's largest). The segment
appends an entry where it appends an offset index entry (every `index_interval_bytes` of log),
when the largest timestamp grew since the last entry.

Invariants: timestamps and relative offsets both strictly increasing; every entry names the
start of a committed batch and the running largest timestamp there; so every batch before an
entry's offset has a timestamp below the entry's. The file holds exactly the entries in memory.
An entry the file system has no room for is skipped (`append` returns False): the index stays
valid, only sparser. Derived data: the segment's recovery scan recomputes the entries and
rewrites the file (atomically, by rename) when it differs (missing, torn, or sparser after a
full disk).

Thread-safety: as offset_index.py's: `append`, `truncate_to_offset`, `flush`, `close` under
the owning partition's lock; `lookup` lock-free (two arrays published together as one tuple,
grown in place timestamps first, counted by offsets, replaced on truncation).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from pathlib import Path

from services.broker.storage.disk_space import is_space_error
from services.broker.storage.errors import CorruptIndexError

ENTRY_BYTES = 12
_ENTRY = struct.Struct(">qI")


def time_index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.timeindex"


class TimeIndex:
    """The in-memory copy of one time index file plus an append-only descriptor on it."""

    def __init__(self, path: Path, base_offset: int, entries: Iterable[tuple[int, int]] = ()):
        self.path = path
        self.base_offset = base_offset
        timestamps, relatives = array("q"), array("I")
        for timestamp_ms, rel in entries:
            timestamps.append(timestamp_ms)
            relatives.append(rel)
        self._entries = (timestamps, relatives)
        self._fd = -1  # opened on the first write

    # -- opening -------------------------------------------------------------------------

    @staticmethod
    def read_entries(path: Path) -> list[tuple[int, int]]:
        """The (timestamp, relative offset) entries of a file; CorruptIndexError when torn or
        not strictly increasing, FileNotFoundError when missing."""
        data = path.read_bytes()
        if len(data) % ENTRY_BYTES:
            raise CorruptIndexError(f"{path.name}: {len(data)} bytes, not whole entries")
        entries = list(_ENTRY.iter_unpack(data))
        for (ts_a, rel_a), (ts_b, rel_b) in zip(entries, entries[1:], strict=False):
            if ts_b <= ts_a or rel_b <= rel_a:
                raise CorruptIndexError(f"{path.name}: entries not strictly increasing")
        return entries

    @classmethod
    def rewrite(cls, path: Path, base_offset: int, entries: list[tuple[int, int]]) -> TimeIndex:
        """A fresh file holding exactly `entries`, replacing any old one atomically."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(b"".join(_ENTRY.pack(ts, rel) for ts, rel in entries))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
        return cls(path, base_offset, entries)

    # -- reading (lock-free) -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries[1])

    def entries(self) -> list[tuple[int, int]]:
        timestamps, relatives = self._entries
        count = len(relatives)
        return [(timestamps[i], relatives[i]) for i in range(count)]

    def last_timestamp(self) -> int | None:
        timestamps, relatives = self._entries
        return timestamps[len(relatives) - 1] if relatives else None

    def offset_below(self, timestamp_ms: int) -> int | None:
        """The offset of the last entry whose timestamp is below `timestamp_ms`: every batch up
        to it is older, so a search for the first batch at or after `timestamp_ms` may start
        there. None when no entry qualifies (start at the segment's first batch)."""
        timestamps, relatives = self._entries
        i = bisect_left(timestamps, timestamp_ms, 0, len(relatives)) - 1
        return None if i < 0 else self.base_offset + relatives[i]

    # -- writing (under the partition lock) ----------------------------------------------

    def append(self, timestamp_ms: int, offset: int) -> bool:
        """Add an entry; False (nothing added) when the file system has no room for it (the
        index is sparse: the next interval tries again)."""
        timestamps, relatives = self._entries
        rel = offset - self.base_offset
        assert not relatives or (timestamp_ms > timestamps[-1] and rel > relatives[-1])
        try:
            fd = self._writable_fd()
            written = os.write(fd, _ENTRY.pack(timestamp_ms, rel))
        except OSError as exc:
            if not is_space_error(exc):
                raise
            return False
        if written != ENTRY_BYTES:
            os.ftruncate(fd, len(relatives) * ENTRY_BYTES)  # whole entries only
            return False
        timestamps.append(timestamp_ms)  # first: a reader counts entries by `relatives`
        relatives.append(rel)
        return True

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop every entry at or beyond `next_offset` (the log is cut there)."""
        timestamps, relatives = self._entries
        keep = bisect_left(relatives, next_offset - self.base_offset, 0, len(relatives))
        if keep == len(relatives):
            return
        self._entries = (timestamps[:keep], relatives[:keep])
        os.ftruncate(self._writable_fd(), keep * ENTRY_BYTES)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def _writable_fd(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
