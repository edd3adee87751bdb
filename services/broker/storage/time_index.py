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
the owning partition's lock; `offset_below` lock-free (index_file.py, which holds what this file
shares with the offset index, says how).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from pathlib import Path

from services.broker.storage.index_file import IndexFile


def time_index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.timeindex"


class TimeIndex(IndexFile):
    """The in-memory copy of one time index file (timestamp, relative offset) plus an
    append-only descriptor on it."""

    ENTRY = struct.Struct(">qI")  # 12 bytes
    VALUE_TYPECODE = "q"
    RELATIVE_FIRST = False


    # -- reading (lock-free) -------------------------------------------------------------

    def last_timestamp(self) -> int | None:
        relatives, timestamps = self._entries
        return timestamps[len(relatives) - 1] if relatives else None

    def offset_below(self, timestamp_ms: int) -> int | None:
        """The offset of the last entry whose timestamp is below `timestamp_ms`: every batch up
        to it is older, so a search for the first batch at or after `timestamp_ms` may start
        there. None when no entry qualifies (start at the segment's first batch)."""
        relatives, timestamps = self._entries
        i = bisect_left(timestamps, timestamp_ms, 0, len(relatives)) - 1
        return None if i < 0 else self.base_offset + relatives[i]

    # -- writing (under the partition lock) ----------------------------------------------

    def append(self, timestamp_ms: int, offset: int) -> bool:
        """Add an entry; False (nothing added) when the file system has no room for it (the
        index is sparse: the next interval tries again)."""
        return self._append(offset - self.base_offset, timestamp_ms)

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop every entry at or beyond `next_offset` (the log is cut there)."""
        relatives, _ = self._entries
        keep = bisect_left(relatives, next_offset - self.base_offset, 0, len(relatives))
        self._truncate_keeping(keep)
