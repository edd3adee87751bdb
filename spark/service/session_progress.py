"""How far the query service may commit its position on the `sessions` topic.

Sessions run concurrently and finish in any order, but a committed position means "every
record before it is finished". So per partition we keep the offsets picked up and not yet
finished; the position to commit is the smallest of them, or the next offset to read when none
is pending. A service that dies redoes exactly the unfinished records and those after them.

Pure state, no I/O; not thread-safe: the service's main loop owns it (workers report finished
sessions to that loop through a queue).
"""

from __future__ import annotations


class SessionProgress:
    def __init__(self) -> None:
        self._next_offset: dict[int, int] = {}  # partition -> next offset to read
        self._pending: dict[int, set[int]] = {}  # partition -> picked up, not finished

    def start(self, partition: int, position: int) -> None:
        """Reading `partition` begins at `position` (the committed one, or the log start)."""
        assert position >= 0
        self._next_offset[partition] = position
        self._pending[partition] = set()

    def picked(self, partition: int, offset: int) -> None:
        """The record at `offset` was read and is being worked on."""
        assert offset >= self._next_offset[partition], "records are read in offset order"
        self._pending[partition].add(offset)
        self._next_offset[partition] = offset + 1

    def skip_to(self, partition: int, position: int) -> None:
        """Reading jumps forward to `position` (records below it were deleted unread)."""
        self._next_offset[partition] = max(self._next_offset[partition], position)

    def finished(self, partition: int, offset: int) -> None:
        """The record at `offset` needs no more work (done, skipped, or given up on)."""
        self._pending[partition].discard(offset)

    def pending(self) -> int:
        return sum(len(offsets) for offsets in self._pending.values())

    def is_pending(self, partition: int, offset: int) -> bool:
        return offset in self._pending.get(partition, ())

    def commit_position(self, partition: int) -> int:
        """Every record below this offset is finished."""
        pending = self._pending[partition]
        return min(pending) if pending else self._next_offset[partition]

    def partitions(self) -> list[int]:
        return sorted(self._next_offset)
