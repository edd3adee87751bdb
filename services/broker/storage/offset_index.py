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
owning partition's lock. `lookup` and `lookup_position` may run concurrently with them without a
lock: the entries live in two arrays published together as one tuple; `append` grows them in
place (positions first, so a reader that finds an offset always finds its position) and
truncation publishes new arrays instead of shrinking the old ones.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path

from services.broker.storage.disk_space import is_space_error
from services.broker.storage.errors import CorruptIndexError

ENTRY_BYTES = 8
RELATIVE_OFFSET_MAX = 2**32 - 1
_ENTRY = struct.Struct(">II")


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.index"


def _pack(entries: Iterable[tuple[int, int]]) -> bytes:
    return b"".join(_ENTRY.pack(rel, pos) for rel, pos in entries)


class OffsetIndex:
    """The in-memory copy of one index file plus an append-only descriptor on it."""

    def __init__(self, path: Path, base_offset: int, entries: Iterable[tuple[int, int]] = ()):
        self.path = path
        self.base_offset = base_offset
        relatives, positions = array("I"), array("I")
        for rel, pos in entries:
            relatives.append(rel)
            positions.append(pos)
        self._entries = (relatives, positions)
        self._fd = -1  # opened on the first write: sealed segments hold no index descriptor

    # -- opening -------------------------------------------------------------------------

    @staticmethod
    def read_entries(path: Path) -> list[tuple[int, int]]:
        """The (relative offset, position) entries of an index file; CorruptIndexError when it
        is torn or not strictly increasing, FileNotFoundError when missing."""
        data = path.read_bytes()
        if len(data) % ENTRY_BYTES:
            raise CorruptIndexError(f"{path.name}: {len(data)} bytes, not whole entries")
        entries = list(_ENTRY.iter_unpack(data))
        for (rel_a, pos_a), (rel_b, pos_b) in zip(entries, entries[1:], strict=False):
            if rel_b <= rel_a or pos_b <= pos_a:
                raise CorruptIndexError(f"{path.name}: entries not strictly increasing")
        return entries

    @classmethod
    def rewrite(cls, path: Path, base_offset: int, entries: list[tuple[int, int]]) -> OffsetIndex:
        """A fresh index file holding exactly `entries`, replacing any old one atomically."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(_pack(entries))
        except BaseException:
            tmp.unlink(missing_ok=True)  # a torn copy: its blocks are better given back now
            raise
        os.replace(tmp, path)
        return cls(path, base_offset, entries)

    # -- reading (lock-free) -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries[0])

    def entries(self) -> list[tuple[int, int]]:
        relatives, positions = self._entries
        return [(relatives[i], positions[i]) for i in range(len(relatives))]

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
        relatives, positions = self._entries
        assert 0 <= rel <= RELATIVE_OFFSET_MAX, "segment rolls before relative offsets overflow"
        assert not relatives or (rel > relatives[-1] and position > positions[-1])
        try:
            fd = self._writable_fd()
            written = os.write(fd, _ENTRY.pack(rel, position))
        except OSError as exc:
            if not is_space_error(exc):
                raise
            return False
        if written != ENTRY_BYTES:
            # Part of the entry reached the file: cut it, the file holds whole entries only.
            os.ftruncate(fd, len(relatives) * ENTRY_BYTES)
            return False
        positions.append(position)
        relatives.append(rel)
        return True

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry at or beyond file `position` (the log is cut there)."""
        relatives, positions = self._entries
        keep = bisect_right(positions, position - 1, 0, len(relatives))
        if keep == len(relatives):
            return
        self._entries = (relatives[:keep], positions[:keep])
        os.ftruncate(self._writable_fd(), keep * ENTRY_BYTES)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def _writable_fd(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def close(self) -> None:
        """Release the descriptor; lookups keep working and a later write reopens it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
