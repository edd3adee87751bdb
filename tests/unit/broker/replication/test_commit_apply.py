"""CommitApplier, stepped by hand on a real Journal: the high watermarks committed entries make
visible, the applied index, and which committed deletes are carried out (once, and only at or
above `effects_from`, the persisted applied index)."""

import pytest

from services.broker.replication.commit_apply import CommitApplier
from services.broker.replication.journal import Journal
from services.broker.replication.journal_record import JournalEntry
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.replication.wire.snapshot_fetch import PartitionEnd, Snapshot, SnapshotTopic

EPOCH = 1


class RecordingEffects:
    """EntryEffects' committed-delete half: records each call as (method, entry index); the
    entries listed in `fail_once` raise OSError on their first delete_incarnation (a full or
    failing disk), as the real removal of a topic's directories may."""

    def __init__(self, fail_once: tuple[int, ...] = ()) -> None:
        self.calls: list[tuple[str, int]] = []
        self._fail_once = set(fail_once)

    def delete_incarnation(self, entry: JournalEntry) -> None:
        self.calls.append(("delete_incarnation", entry.index))
        if entry.index in self._fail_once:
            self._fail_once.discard(entry.index)
            raise OSError(f"removal of entry {entry.index}'s incarnation failed")

    def delete_records(self, entry: JournalEntry) -> None:
        self.calls.append(("delete_records", entry.index))


@pytest.fixture
def journal(tmp_path):
    opened = Journal(tmp_path / "@replication")
    yield opened
    opened.close()


def append(journal: Journal, kind: EntryKind, **fields) -> int:
    """Append an entry as a follower copies the leader's; returns its index."""
    return journal.append_replica(JournalEntry(journal.end, EPOCH, kind, **fields)).index


def create(journal: Journal, topic: str, partitions: int = 2) -> int:
    return append(journal, EntryKind.CREATE_TOPIC, topic=topic, partitions=partitions)


def batch(journal: Journal, topic: str, partition: int, base_offset: int, count: int) -> int:
    return append(journal, EntryKind.BATCH, topic=topic, partition=partition,
                  base_offset=base_offset, record_count=count, batch_bytes=100)


def skipped(journal: Journal, topic: str, partition: int, base_offset: int, count: int) -> int:
    return append(journal, EntryKind.SKIPPED, topic=topic, partition=partition,
                  base_offset=base_offset, record_count=count)


def delete_topic(journal: Journal, topic: str) -> int:
    return append(journal, EntryKind.DELETE_TOPIC, topic=topic)


def delete_records(journal: Journal, topic: str, partition: int, offset: int) -> int:
    return append(journal, EntryKind.DELETE_RECORDS, topic=topic, partition=partition,
                  base_offset=offset)


def applier(journal: Journal, effects_from: int = 0,
            effects: RecordingEffects | None = None) -> tuple[CommitApplier, RecordingEffects]:
    effects = effects or RecordingEffects()
    return CommitApplier(journal, effects, effects_from), effects  # type: ignore[arg-type]


# -- high watermarks ----------------------------------------------------------------------


def test_a_partition_never_written_has_high_watermark_zero(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 3)
    commit_applier, _ = applier(journal)
    assert commit_applier.high_watermark("t", 1) == 0
    commit_applier.apply(journal.end)
    assert commit_applier.high_watermark("t", 0) == 3  # the scenario: t/0 was written
    assert commit_applier.high_watermark("t", 1) == 0
    assert commit_applier.high_watermark("never-created", 0) == 0


def test_high_watermark_is_the_end_of_the_committed_batch_and_skipped_entries(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 3)
    skipped(journal, "t", 0, 3, 2)
    batch(journal, "t", 1, 0, 4)
    uncommitted = batch(journal, "t", 0, 5, 1)
    commit_applier, _ = applier(journal)
    commit_applier.apply(uncommitted)
    assert (commit_applier.high_watermark("t", 0), commit_applier.high_watermark("t", 1)) \
        == (5, 4)
    commit_applier.apply(uncommitted + 1)
    assert commit_applier.high_watermark("t", 0) == 6


def test_apply_returns_exactly_the_partitions_whose_watermark_moved(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 3)
    batch(journal, "t", 1, 0, 4)
    commit_applier, _ = applier(journal)
    assert commit_applier.apply(journal.end) == ({("t", 0), ("t", 1)}, False)
    batch(journal, "t", 1, 4, 2)
    assert commit_applier.apply(journal.end) == ({("t", 1)}, False)
    assert commit_applier.apply(journal.end) == (set(), False)  # nothing newly committed


def test_high_watermark_never_goes_down(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 10)
    skipped(journal, "t", 0, 2, 1)  # an end below the high watermark
    commit_applier, _ = applier(journal)
    commit_applier.apply(2)
    assert commit_applier.high_watermark("t", 0) == 10
    commit_applier.apply(journal.end)
    assert commit_applier.high_watermark("t", 0) == 10


# -- DELETE_TOPIC ---------------------------------------------------------------------------


def test_delete_topic_forgets_its_watermarks_only_and_is_carried_out(journal):
    create(journal, "gone")
    create(journal, "kept")
    batch(journal, "gone", 0, 0, 3)
    batch(journal, "kept", 0, 0, 4)
    deleted_at = delete_topic(journal, "gone")
    commit_applier, effects = applier(journal)
    touched, deleted = commit_applier.apply(journal.end)
    assert effects.calls == [("delete_incarnation", deleted_at)]
    assert (touched, deleted) == ({("kept", 0)}, True)
    assert commit_applier.hw == {("kept", 0): 4}
    assert commit_applier.high_watermark("gone", 0) == 0


def test_a_topic_recreated_after_its_delete_keeps_the_new_incarnations_watermarks(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 9)
    delete_topic(journal, "t")
    create(journal, "t")
    batch(journal, "t", 0, 0, 2)
    commit_applier, _ = applier(journal)
    touched, deleted = commit_applier.apply(journal.end)
    assert (touched, deleted) == ({("t", 0)}, True)
    assert commit_applier.high_watermark("t", 0) == 2


def test_delete_topic_is_carried_out_once_across_applies(journal):
    create(journal, "t")
    deleted_at = delete_topic(journal, "t")
    commit_applier, effects = applier(journal)
    assert commit_applier.apply(journal.end) == (set(), True)
    create(journal, "u")
    batch(journal, "u", 0, 0, 1)
    assert commit_applier.apply(journal.end) == ({("u", 0)}, False)
    assert effects.calls == [("delete_incarnation", deleted_at)]


def test_delete_topic_below_effects_from_only_forgets_watermarks(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 3)
    deleted_at = delete_topic(journal, "t")
    commit_applier, effects = applier(journal, effects_from=deleted_at + 1)
    assert commit_applier.apply(journal.end) == (set(), False)
    assert (effects.calls, commit_applier.hw) == ([], {})


def test_delete_topic_exactly_at_effects_from_is_carried_out(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 3)
    deleted_at = delete_topic(journal, "t")
    commit_applier, effects = applier(journal, effects_from=deleted_at)
    assert commit_applier.apply(journal.end) == (set(), True)
    assert effects.calls == [("delete_incarnation", deleted_at)]


# -- DELETE_RECORDS -------------------------------------------------------------------------


def test_delete_records_is_carried_out_at_and_above_effects_from_only(journal):
    create(journal, "t")
    batch(journal, "t", 0, 0, 10)
    below = delete_records(journal, "t", 0, 2)
    boundary = delete_records(journal, "t", 0, 4)
    above = delete_records(journal, "t", 0, 6)
    commit_applier, effects = applier(journal, effects_from=boundary)
    assert commit_applier.apply(journal.end) == ({("t", 0)}, False)
    assert below < boundary < above  # the scenario: one on each side of the boundary
    assert effects.calls == [("delete_records", boundary), ("delete_records", above)]


def test_no_other_kind_of_entry_moves_a_log_start(journal):
    append(journal, EntryKind.NOOP)
    create(journal, "t")
    batch(journal, "t", 0, 0, 3)
    skipped(journal, "t", 1, 0, 2)
    commit_applier, effects = applier(journal)
    commit_applier.apply(journal.end)
    assert commit_applier.applied == journal.end == 4  # every entry was applied
    assert effects.calls == []


# -- a restart: effects_from ----------------------------------------------------------------


def test_entries_below_effects_from_only_rebuild_the_watermarks(journal):
    create(journal, "gone")
    create(journal, "kept")
    batch(journal, "gone", 0, 0, 3)
    batch(journal, "kept", 0, 0, 5)
    delete_records(journal, "kept", 0, 2)
    delete_topic(journal, "gone")
    boundary = delete_records(journal, "kept", 0, 3)
    commit_applier, effects = applier(journal, effects_from=boundary)
    assert commit_applier.apply(boundary) == ({("kept", 0)}, False)
    assert effects.calls == []
    assert commit_applier.hw == {("kept", 0): 5}
    commit_applier.apply(journal.end)
    assert effects.calls == [("delete_records", boundary)]


# -- the applied index ----------------------------------------------------------------------


def test_applied_is_the_commit_after_apply_and_never_goes_back(journal):
    create(journal, "t")
    for offset in range(4):
        batch(journal, "t", 0, offset, 1)
    commit_applier, _ = applier(journal)
    assert commit_applier.applied == journal.start == 0
    commit_applier.apply(3)
    assert (commit_applier.applied, commit_applier.high_watermark("t", 0)) == (3, 2)
    commit_applier.apply(2)  # a stale commit index
    assert (commit_applier.applied, commit_applier.high_watermark("t", 0)) == (3, 2)
    commit_applier.apply(journal.end)
    assert (commit_applier.applied, commit_applier.high_watermark("t", 0)) == (5, 4)


def test_an_effect_that_raises_leaves_applied_at_the_failing_entry_and_a_retry_resumes(
        journal):
    create(journal, "gone")
    create(journal, "kept")
    batch(journal, "kept", 0, 0, 2)
    moved_at = delete_records(journal, "kept", 0, 1)
    deleted_at = delete_topic(journal, "gone")
    batch(journal, "kept", 0, 2, 3)
    commit_applier, effects = applier(journal, effects=RecordingEffects(fail_once=(deleted_at,)))
    with pytest.raises(OSError):
        commit_applier.apply(journal.end)
    assert effects.calls == [("delete_records", moved_at), ("delete_incarnation", deleted_at)]
    # Every entry before the failing one is applied; the failing one and those after are not.
    assert commit_applier.applied == deleted_at
    assert commit_applier.high_watermark("kept", 0) == 2
    assert commit_applier.apply(journal.end) == ({("kept", 0)}, True)
    assert effects.calls[2:] == [("delete_incarnation", deleted_at)]  # nothing re-applied
    assert (commit_applier.applied, commit_applier.high_watermark("kept", 0)) == (journal.end, 5)


# -- install(snapshot) ----------------------------------------------------------------------


def installed_snapshot(end: int) -> Snapshot:
    return Snapshot(end, ((EPOCH, 0),), (SnapshotTopic("a", EPOCH, 0, 1),),
                    (PartitionEnd("a", 0, 7),))


@pytest.mark.parametrize(("effects_from", "expected_effects_from"), [(4, 10), (12, 12)])
def test_install_takes_the_snapshots_watermarks_and_end(journal, effects_from,
                                                        expected_effects_from):
    create(journal, "a", partitions=1)
    create(journal, "b", partitions=1)
    batch(journal, "a", 0, 0, 5)
    batch(journal, "b", 0, 0, 3)
    commit_applier, effects = applier(journal, effects_from=effects_from)
    commit_applier.apply(journal.end)
    assert commit_applier.hw == {("a", 0): 5, ("b", 0): 3}  # the scenario: entries applied
    snapshot = installed_snapshot(10)
    journal.install(snapshot)
    commit_applier.install(snapshot)
    assert commit_applier.hw == {("a", 0): 7}
    assert commit_applier.high_watermark("b", 0) == 0
    assert (commit_applier.applied, commit_applier.effects_from) == (10, expected_effects_from)
    batch(journal, "a", 0, 7, 2)
    assert commit_applier.apply(journal.end) == ({("a", 0)}, False)
    assert commit_applier.high_watermark("a", 0) == 9
    assert effects.calls == []


def test_a_new_applier_starts_from_the_journals_snapshot(journal):
    journal.install(installed_snapshot(10))
    commit_applier, _ = applier(journal, effects_from=10)
    assert (commit_applier.hw, commit_applier.applied) == ({("a", 0): 7}, 10)
