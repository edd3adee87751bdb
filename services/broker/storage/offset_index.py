"""OffsetIndex: the sparse offset → file position index of one log segment (Kafka's
OffsetIndex).

File format (`%020d.index`, named like its segment by base offset): back-to-back 8-byte
big-endian entries `u32 relative_offset | u32 position`, where relative_offset is a batch's base
offset minus the segment's base offset and position is where that batch starts in the log file.
The segment adds an entry every `index_interval_bytes` of log, so a lookup lands at most that
many bytes before the wanted batch and the segment walks batch headers from there.

Invariants: relative offsets and positions are both strictly increasing; every entry names the
start of a committed batch; the file holds exactly the entries in memory. An entry the file
system has no room for is skipped (`append` returns False): the index stays valid, only
sparser. The file is derived data: `load` raises CorruptIndexError on a torn or unordered
file, the segment checks every entry against its log scan on open, and rebuilds the file
(atomically, by rename) when it is missing, torn or inconsistent.

Thread-safety: `append`, `truncate_to_position`, `rewrite`, `flush` and `close` run under the
owning partition's lock; `lookup` and `lookup_position` may run concurrently with them without a
lock (index_file.py, which holds what this file shares with the time index, says how).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from pathlib import Path

from services.broker.storage.index_file import IndexFile

ENTRY_BYTES = 8
RELATIVE_OFFSET_MAX = 2**32 - 1


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.index"


class OffsetIndex(IndexFile):
    """The in-memory copy of one index file (relative offset, position) plus an append-only
    descriptor on it."""

    ENTRY = struct.Struct(">II")
    assert ENTRY.size == ENTRY_BYTES
    VALUE_TYPECODE = "I"
    RELATIVE_FIRST = True


    # -- reading (lock-free) -------------------------------------------------------------

    def lookup(self, offset: int) -> tuple[int, int] | None:
        """(absolute offset, position) of the greatest entry at or below `offset`; None when
        every entry is above it (the caller starts at the segment's first batch)."""
        relatives, positions = self._entries
        rel = offset - self.base_offset
        if rel < 0:
            return None
        i = bisect_right(relatives, min(rel, RELATIVE_OFFSET_MAX)) - 1
        if i < 0:
            return None
        return self.base_offset + relatives[i], positions[i]

    def lookup_position(self, position: int) -> tuple[int, int] | None:
        """(absolute offset, position) of the greatest entry at or below file `position`."""
        relatives, positions = self._entries
        i = bisect_right(positions, min(position, 2**32 - 1), 0, len(relatives)) - 1
        if i < 0:
            return None
        return self.base_offset + relatives[i], positions[i]

    def last_position(self) -> int | None:
        relatives, positions = self._entries
        return positions[len(relatives) - 1] if relatives else None

    # -- writing (under the partition lock) ----------------------------------------------

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; False (nothing added) when the file system has no room for it. The
        index is sparse: a missing entry only makes lookups walk a few more batch headers, so
        the append of an already stamped batch never fails for it (the segment tries again at
        its next batch)."""
        rel = offset - self.base_offset
        assert 0 <= rel <= RELATIVE_OFFSET_MAX, "segment rolls before relative offsets overflow"
        return self._append(rel, position)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry at or beyond file `position` (the log is cut there)."""
        relatives, positions = self._entries
        self._truncate_keeping(bisect_right(positions, position - 1, 0, len(relatives)))
