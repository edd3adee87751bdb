"""CommitApplier: what committed journal entries make visible -- the high watermarks -- and the
applied index, below which every committed entry has been applied.

It owns three numbers and a table:
- `hw`: per partition, the end offset of the committed BATCH/SKIPPED entries of its live
  incarnation (the high watermark consumers read up to). The snapshot's partition ends are the
  high watermarks of the compacted prefix (all of it is committed);
- `applied`: entries below it are applied (in memory: the high watermarks);
- `effects_from`: the effects of the entries below it (a DELETE_TOPIC's removal of its
  incarnation, a DELETE_RECORDS' move of its partition's log start) were done before this
  start, so they only rebuild the high watermarks; every committed entry
  is carried out once, across restarts.

Invariants: entries are applied one by one in index order, and only committed ones; `applied`
never goes back except when a snapshot replaces the journal (`install`, which moves it to the
snapshot's end); a DELETE_TOPIC's removal happens only once committed, since a delete cannot be
undone by truncation. The persisted applied index (AppliedStore) is written by the node after
a delete is applied (`apply` says so) and with the commit index.

Threads: every method runs under the node's `_lock` (on whichever thread advanced the commit:
the loop, a request thread, a produce's `leader_appended`), except `high_watermark`, read
without a lock: a dict read, and a snapshot install replaces the whole table at once.
"""

from __future__ import annotations

from services.broker.replication.entry_effects import EntryEffects, HighWatermarks
from services.broker.replication.journal import Journal
from services.broker.replication.snapshot import forget_topic, partition_ends
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.replication.wire.snapshot_fetch import Snapshot


class CommitApplier:
    def __init__(self, journal: Journal, effects: EntryEffects, effects_from: int) -> None:
        """`effects_from`: the persisted applied index (see the module docstring)."""
        self._journal = journal
        self._effects = effects
        # The snapshot's partition ends are its high watermarks (all of it is committed).
        self.hw: HighWatermarks = partition_ends(journal.snapshot)
        # Entries below it are applied (in memory: the high watermarks).
        self.applied = journal.start
        self.effects_from = effects_from

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.hw.get((topic, partition), 0)

    def apply(self, commit: int) -> tuple[set[tuple[str, int]], bool]:
        """Make entries below `commit` visible, one by one in index order: high watermarks, and
        a DELETE_TOPIC's removal of the incarnation it names. Entries below `effects_from`
        only rebuild the high watermarks -- their effects were done before the restart.
        Returns the partitions whose high watermark moved and whether a delete was carried
        out (the applied index is then to be persisted)."""
        touched: set[tuple[str, int]] = set()
        deleted = False
        for entry in self._journal.entries(self.applied, commit):
            kind = entry.kind
            if kind in (EntryKind.BATCH, EntryKind.SKIPPED):
                key = (entry.topic, entry.partition)
                self.hw[key] = max(self.hw.get(key, 0), entry.end_offset)
                touched.add(key)
            elif kind is EntryKind.DELETE_TOPIC:
                # In index order every high watermark of the topic so far is the deleted
                # incarnation's; a newer one's batches come after this entry.
                forget_topic(self.hw, entry.topic)
                touched = {key for key in touched if key[0] != entry.topic}
                if entry.index >= self.effects_from:
                    self._effects.delete_incarnation(entry)
                    deleted = True
            elif kind is EntryKind.DELETE_RECORDS and entry.index >= self.effects_from:
                # At commit, never at append: deleted segments cannot come back if a
                # truncation removes the entry. Persisted by the partition (its log start
                # file), so the applied index need not be.
                self._effects.delete_records(entry)
            self.applied = entry.index + 1
        self.applied = max(self.applied, commit)
        return touched, deleted

    def install(self, snapshot: Snapshot) -> None:
        """The journal became `snapshot`: everything below its end is applied, its partition
        ends are the high watermarks and its effects are done."""
        self.hw = partition_ends(snapshot)
        self.applied = snapshot.end
        self.effects_from = max(self.effects_from, snapshot.end)
