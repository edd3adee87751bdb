"""IndexFile: what a segment's sparse index files share (offset_index.py, time_index.py).

File format: back-to-back fixed-size entries (the subclass's `ENTRY` struct), each naming a
batch by its offset relative to the segment's base offset, beside one value (a file position,
a timestamp); no header. The subclass says in which order the two sit in an entry
(`RELATIVE_FIRST`).

Invariants: relative offsets and values are both strictly increasing; the file holds exactly
the entries in memory, whole entries only (a write the file system cut short is cut back). An
entry the file system has no room for is skipped (`_append` returns False): the index stays
valid, only sparser. Derived data: `read_entries` raises CorruptIndexError on a torn or
unordered file and the segment rebuilds it (`rewrite`, atomically, by rename).

Thread-safety: writes (`_append`, `_truncate_keeping`, `flush`, `close`, `delete`) run under
the owning partition's lock; reads may run concurrently without a lock: the entries live in two
arrays published together as one tuple `(relatives, values)`; `_append` grows them in place,
the value first, and readers count entries by `relatives`, so a reader that finds an offset
always finds its value; truncation publishes new arrays instead of shrinking the old ones.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Self

from services.broker.storage.disk_space import is_space_error
from services.broker.storage.errors import CorruptIndexError

Entry = tuple[int, int]  # as the file holds it (the subclass's order)


class IndexFile:
    """The in-memory copy of one index file plus an append-only descriptor on it."""

    ENTRY: ClassVar[struct.Struct]
    VALUE_TYPECODE: ClassVar[str]  # the `array` typecode of the values
    RELATIVE_FIRST: ClassVar[bool]  # the relative offset is an entry's first field

    def __init__(self, path: Path, base_offset: int, entries: Iterable[Entry] = ()):
        self.path = path
        self.base_offset = base_offset
        relatives, values = array("I"), array(self.VALUE_TYPECODE)
        for entry in entries:
            rel, value = self._split(entry)
            relatives.append(rel)
            values.append(value)
        self._entries = (relatives, values)
        self._fd = -1  # opened on the first write: sealed segments hold no index descriptor

    @classmethod
    def _split(cls, entry: Entry) -> tuple[int, int]:
        """(relative offset, value) of an entry in file order."""
        return (entry[0], entry[1]) if cls.RELATIVE_FIRST else (entry[1], entry[0])

    @classmethod
    def _join(cls, rel: int, value: int) -> Entry:
        """The entry in file order."""
        return (rel, value) if cls.RELATIVE_FIRST else (value, rel)

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def read_entries(cls, path: Path) -> list[Entry]:
        """The entries of a file, in file order; CorruptIndexError when it is torn or not
        strictly increasing, FileNotFoundError when missing."""
        data = path.read_bytes()
        if len(data) % cls.ENTRY.size:
            raise CorruptIndexError(f"{path.name}: {len(data)} bytes, not whole entries")
        entries = list(cls.ENTRY.iter_unpack(data))
        for (a1, b1), (a2, b2) in zip(entries, entries[1:], strict=False):
            if a2 <= a1 or b2 <= b1:
                raise CorruptIndexError(f"{path.name}: entries not strictly increasing")
        return entries

    @classmethod
    def rewrite(cls, path: Path, base_offset: int, entries: list[Entry]) -> Self:
        """A fresh file holding exactly `entries`, replacing any old one atomically."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(b"".join(cls.ENTRY.pack(*entry) for entry in entries))
        except BaseException:
            tmp.unlink(missing_ok=True)  # a torn copy: its blocks are better given back now
            raise
        os.replace(tmp, path)
        return cls(path, base_offset, entries)

    # -- reading (lock-free) -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries[0])

    def entries(self) -> list[Entry]:
        relatives, values = self._entries
        return [self._join(relatives[i], values[i]) for i in range(len(relatives))]

    # -- writing (under the partition lock) ----------------------------------------------

    def _append(self, rel: int, value: int) -> bool:
        """Add an entry; False (nothing added) when the file system has no room for it."""
        relatives, values = self._entries
        assert not relatives or (rel > relatives[-1] and value > values[-1])
        try:
            fd = self._writable_fd()
            written = os.write(fd, self.ENTRY.pack(*self._join(rel, value)))
        except OSError as exc:
            if not is_space_error(exc):
                raise
            return False
        if written != self.ENTRY.size:
            # Part of the entry reached the file: cut it, the file holds whole entries only.
            os.ftruncate(fd, len(relatives) * self.ENTRY.size)
            return False
        values.append(value)  # first: a reader counts entries by `relatives`
        relatives.append(rel)
        return True

    def _truncate_keeping(self, keep: int) -> None:
        """Keep the first `keep` entries only."""
        relatives, values = self._entries
        if keep == len(relatives):
            return
        self._entries = (relatives[:keep], values[:keep])
        os.ftruncate(self._writable_fd(), keep * self.ENTRY.size)

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
