"""LeaderEpochCache: the leader epochs of one partition's log, each with the first offset
written in it (Kafka's LeaderEpochFileCache, KIP-101), and the end offset of an epoch that
OffsetForLeaderEpoch answers (KIP-320).

Derived data, never stored in a file of its own: every batch carries the epoch its leader
stamped (segment.py), and recovery reads every batch header anyway, so PartitionLog feeds the
cache every header on open and every batch it appends, cuts it when the log is truncated and
trims it when the log start moves. (Kafka keeps a checkpoint file because its recovery does not
read every batch.)

Invariants: entries `(epoch, start_offset)` strictly increasing in both; each start is the
base offset of the first batch of that epoch still in the log (the log start for the first
entry once `truncate_from_start` moved it); batches without an epoch (-1) add nothing. A batch
whose epoch is below the latest one (never stamped by a Raft leader, whose epochs only grow
along the journal) drops the entries it contradicts, as Kafka's `assign` does.

The answer (`end_offset_for`), Kafka's semantics: the end of epoch E is the start of the first
epoch above E, paired with the largest epoch at or below E that the log holds (E itself when
none is held, the data being gone); the latest epoch ends at the log end. `current_epoch`, the
epoch the partition's leader writes in now, counts as the latest epoch, starting at the log
end, even before a batch of it is written (Kafka's leader assigns its epoch on election). An
epoch above every one known, or -1, is UNDEFINED: (-1, -1).

Thread-safety: `assign`, `truncate_from_end`, `truncate_from_start` and `clear` run under the
owning partition's lock; `end_offset_for` and `entries` are lock-free reads of the entries
tuple, which is republished whole (epochs change rarely: once per leader election).
Bounded by the number of elections whose leaders wrote to the partition's retained log.
"""

from __future__ import annotations

from bisect import bisect_right

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self) -> None:
        self._entries: tuple[tuple[int, int], ...] = ()

    def entries(self) -> tuple[tuple[int, int], ...]:
        return self._entries

    # -- writing (under the partition lock) ----------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """A batch of `epoch` at `start_offset` was appended (or recovered)."""
        entries = self._entries
        if epoch < 0 or (entries and entries[-1][0] == epoch):
            return
        if entries and (epoch < entries[-1][0] or start_offset <= entries[-1][1]):
            entries = tuple(e for e in entries if e[0] < epoch and e[1] < start_offset)
        self._entries = (*entries, (epoch, start_offset))

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at `end_offset`: epochs starting there or later are gone."""
        if self._entries and self._entries[-1][1] >= end_offset:
            self._entries = tuple(e for e in self._entries if e[1] < end_offset)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it starts there."""
        entries = self._entries
        below = [e for e in entries if e[1] <= start_offset]
        if not below:
            return
        kept = entries[len(below) :]
        self._entries = ((below[-1][0], start_offset), *kept)

    def clear(self) -> None:
        self._entries = ()

    # -- reading (lock-free) -------------------------------------------------------------

    def end_offset_for(
        self, requested_epoch: int, log_end_offset: int, current_epoch: int | None = None
    ) -> tuple[int, int]:
        """(epoch, end offset) of `requested_epoch`; see the module docstring."""
        entries = self._entries
        if current_epoch is not None and (not entries or current_epoch > entries[-1][0]):
            entries = (*entries, (current_epoch, log_end_offset))
        if requested_epoch < 0 or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(entries, (requested_epoch, 2**63))
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        end_offset = entries[higher][1]
        if higher == 0:
            return requested_epoch, end_offset
        return entries[higher - 1][0], end_offset
