"""Replication groups (multi-raft), the pure parts stepped by hand: placement, the group-count
marker, a data group's carried topic ids (journal and compaction), the committed topics view,
the topic mirror's decisions and the preferred-leader rule."""

from __future__ import annotations

import dataclasses
import json
import struct
from types import MappingProxyType

import crc32c
import pytest

from services.broker.replication.committed_topics import CommittedTopics, LiveTopic, TopicsView
from services.broker.replication.journal import Journal
from services.broker.replication.journal_record import (
    FILE_HEADER_BYTES,
    JOURNAL_FILE,
    RECORD_PREFIX_BYTES,
    JournalEntry,
    TopicId,
    carrying,
    closing,
)
from services.broker.replication.leader_balance import BalanceRule
from services.broker.replication.placement import (
    GROUPS_FILE,
    CorruptGroupsFileError,
    GroupCountMismatchError,
    InvalidGroupCountError,
    check_group_count,
    check_groups,
    group_directory,
    group_of,
    partitions_of,
    preferred_leader,
)
from services.broker.replication.raft import LogView, RaftState, Role
from services.broker.replication.topic_mirror import CloseTopic, OpenTopic, decide
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.log import Log

# -- placement ------------------------------------------------------------------------------


def test_consecutive_partitions_fall_in_consecutive_groups_and_internal_topics_in_group_0():
    first = group_of("flights-c1", 0, 3)
    assert [group_of("flights-c1", p, 3) for p in range(4)] == [
        first, (first + 1) % 3, (first + 2) % 3, first]
    assert {group_of(f"topic-{i}", 0, 3) for i in range(30)} == {0, 1, 2}
    assert group_of("__offsets", 0, 3) == 0 and group_of("__offsets", 5, 3) == 0
    assert all(group_of("anything", p, 1) == 0 for p in range(8))
    assert sorted(p for g in range(3) for p in partitions_of("t", 7, g, 3)) == list(range(7))


def test_preferred_leaders_spread_one_group_per_broker_by_node_id():
    assert [preferred_leader(g, {3, 1, 2}) for g in range(3)] == [1, 2, 3]
    assert [preferred_leader(g, [5, 9]) for g in range(3)] == [5, 9, 5]


def test_group_count_bounds():
    assert check_groups(1) == 1 and check_groups(64) == 64
    for wrong in (0, -1, 65):
        with pytest.raises(InvalidGroupCountError):
            check_groups(wrong)


def test_group_count_is_recorded_and_a_change_refused(tmp_path):
    data = tmp_path / "data"
    check_group_count(data, 3)
    assert json.loads((data / GROUPS_FILE).read_text()) == {"format": 1, "groups": 3}
    check_group_count(data, 3)  # the same count: fine
    with pytest.raises(GroupCountMismatchError) as refused:
        check_group_count(data, 1)
    assert refused.value.written == 3 and "--replication-groups 3" in str(refused.value)
    assert group_directory(data, 0) == data and group_directory(data, 2) == data / "@group-2"


def test_a_directory_from_before_groups_counts_as_one_group(tmp_path):
    data = tmp_path / "data"
    with Log(data) as store:
        store.create_topic("t", 2)
    with pytest.raises(GroupCountMismatchError) as refused:
        check_group_count(data, 3)
    assert refused.value.written == 1
    check_group_count(data, 1)
    assert json.loads((data / GROUPS_FILE).read_text())["groups"] == 1


def test_an_empty_directory_takes_any_count_and_a_damaged_marker_is_refused(tmp_path):
    data = tmp_path / "data"
    with Log(data):
        pass  # a Log that held nothing leaves its lock file only
    check_group_count(data, 5)
    (data / GROUPS_FILE).write_text('{"format": 1, "groups": "five"}')
    with pytest.raises(CorruptGroupsFileError):
        check_group_count(data, 5)
    (data / GROUPS_FILE).write_text("{trunc")
    with pytest.raises(CorruptGroupsFileError):
        check_group_count(data, 5)


def test_a_log_holds_only_its_groups_partitions(tmp_path):
    def holds(topic, partition):
        return group_of(topic, partition, 3) == 1

    with Log(tmp_path / "g1", holds=holds) as store:
        store.create_topic("t", 6)
        held = partitions_of("t", 6, 1, 3)
        assert store.topics() == {"t": 6} and store.held("t") == held and len(held) == 2
        assert sorted(p.name for p in (tmp_path / "g1" / "t").iterdir()
                      if p.is_dir()) == sorted(str(p) for p in held)
        other = next(p for p in range(6) if p not in held)
        with pytest.raises(Exception, match="another replication group"):
            store.partition("t", other)
        store.partition("t", held[0])
    with Log(tmp_path / "g1", holds=holds) as reopened:  # recovery opens the held ones only
        assert reopened.held("t") == held


# -- a data group's carried topic ids ------------------------------------------------------


def test_a_data_groups_create_names_the_metadata_incarnation_it_opens(tmp_path):
    opened = TopicId(epoch=4, index=17)
    with_epoch_0 = TopicId(epoch=0, index=2)  # an adopted topic's: epoch 0 must still carry
    journal = Journal(tmp_path / "j")
    try:
        journal.append_replica(JournalEntry(0, 1, EntryKind.NOOP))
        create = journal.append_replica(JournalEntry(1, 1, EntryKind.CREATE_TOPIC, "t",
                                                     partitions=4, **carrying(opened)))
        batch = journal.append_replica(JournalEntry(2, 1, EntryKind.BATCH, "t", 1, 0, 5,
                                                    batch_bytes=80))
        other = journal.append_replica(JournalEntry(3, 1, EntryKind.CREATE_TOPIC, "u",
                                                    partitions=1, **carrying(with_epoch_0)))
        plain = journal.append_replica(JournalEntry(4, 2, EntryKind.CREATE_TOPIC, "v",
                                                    partitions=1))
        assert create.topic_id == opened and batch.topic_id == opened
        assert other.topic_id == with_epoch_0
        assert plain.topic_id == TopicId(2, 4) and plain.carried_topic_id is None
        journal.compact(5)
        ids = {t.name: (t.id_epoch, t.id_index) for t in journal.snapshot.topics}
        assert ids == {"t": (4, 17), "u": (0, 2), "v": (2, 4)}
    finally:
        journal.close()
    reopened = Journal(tmp_path / "j")
    try:
        assert reopened.incarnation("t") == opened and reopened.incarnation("v") == (2, 4)
    finally:
        reopened.close()


def _data_group_journal(path) -> Journal:
    """A data group's journal: 0 NOOP, 1 open t (metadata id (1, 3)), 2 close t (decided on
    a metadata prefix ending at 9), 3 open u (metadata id (2, 6)); only the close carries a
    prefix end past its ids."""
    journal = Journal(path)
    journal.append_replica(JournalEntry(0, 1, EntryKind.NOOP))
    journal.append_replica(JournalEntry(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1,
                                        **carrying(TopicId(1, 3))))
    journal.append_replica(JournalEntry(2, 1, EntryKind.DELETE_TOPIC, "t", **closing(9)))
    journal.append_replica(JournalEntry(3, 1, EntryKind.CREATE_TOPIC, "u", partitions=1,
                                        **carrying(TopicId(2, 6))))
    return journal


def test_a_data_groups_watermark_is_kept_by_compaction_and_a_restart(tmp_path):
    journal = _data_group_journal(tmp_path / "j")
    try:
        entries = journal.entries()
        assert [entry.metadata_end_seen for entry in entries] == [0, 4, 9, 7]
        assert entries[2].topic_id == TopicId(1, 3), "the close names the incarnation"
        topics = CommittedTopics(journal)
        assert topics.at(2).metadata_end_seen == 4
        assert topics.pending(2).metadata_end_seen == 9, "the uncommitted close counts"
        journal.compact(4)  # the close is folded: its watermark lives on in the snapshot
        assert journal.snapshot.metadata_end_seen == 9
        assert CommittedTopics(journal).pending(4).metadata_end_seen == 9
    finally:
        journal.close()
    reopened = Journal(tmp_path / "j")
    try:
        assert reopened.snapshot.metadata_end_seen == 9
        assert CommittedTopics(reopened).at(4) == TopicsView(
            4, {"u": LiveTopic(TopicId(2, 6), 1)}, metadata_end_seen=9)
    finally:
        reopened.close()


def test_a_metadata_groups_own_entries_carry_no_watermark(tmp_path):
    journal = _metadata_journal(tmp_path)
    try:
        assert [entry.metadata_end_seen for entry in journal.entries()] == [0] * 6
        journal.compact(6)
        assert journal.snapshot.metadata_end_seen == 0
    finally:
        journal.close()


def test_a_journal_compacted_before_the_watermark_existed_still_opens(tmp_path):
    """Format version 2: its snapshot table ends after the partition ends; it reads as
    watermark 0, and the next compaction writes the current version (4)."""
    journal = _data_group_journal(tmp_path / "j")
    journal.compact(2)
    snapshot = journal.snapshot
    journal.close()
    path = tmp_path / "j" / JOURNAL_FILE
    table = snapshot.encode()
    records = path.read_bytes()[FILE_HEADER_BYTES + RECORD_PREFIX_BYTES + len(table):]
    # Without the trailing i64 watermark and the (empty) u32 count of log starts.
    assert not snapshot.log_starts
    old_table = table[:-12]
    path.write_bytes(b"KJNL\x00\x02\x00\x00" + struct.pack(
        ">II", len(old_table), crc32c.crc32c(old_table)) + old_table + records)
    reopened = Journal(tmp_path / "j")
    try:
        assert reopened.snapshot == dataclasses.replace(snapshot, metadata_end_seen=0)
        assert [entry.index for entry in reopened.entries()] == [2, 3]
        assert CommittedTopics(reopened).pending(2).metadata_end_seen == 9, "from the entries"
        reopened.compact(4)
    finally:
        reopened.close()
    assert path.read_bytes()[:8] == b"KJNL\x00\x04\x00\x00"
    again = Journal(tmp_path / "j")
    try:
        assert again.snapshot.metadata_end_seen == 9
    finally:
        again.close()


# -- committed topics ------------------------------------------------------------------------


def _metadata_journal(tmp_path) -> Journal:
    """0 NOOP, 1 CREATE t, 2 CREATE u, 3 DELETE t, 4 CREATE t (again), 5 DELETE u."""
    journal = Journal(tmp_path / "meta")
    entries = [(EntryKind.NOOP, "", 0), (EntryKind.CREATE_TOPIC, "t", 4),
               (EntryKind.CREATE_TOPIC, "u", 1), (EntryKind.DELETE_TOPIC, "t", 0),
               (EntryKind.CREATE_TOPIC, "t", 2), (EntryKind.DELETE_TOPIC, "u", 0)]
    for index, (kind, topic, partitions) in enumerate(entries):
        journal.append_replica(JournalEntry(index, 1, kind, topic, partitions=partitions))
    return journal


def test_committed_topics_follow_the_commit_index_only(tmp_path):
    journal = _metadata_journal(tmp_path)
    view = CommittedTopics(journal)
    try:
        assert view.at(0).topics == {}
        assert view.at(3).topics == {"t": LiveTopic(TopicId(1, 1), 4),
                                     "u": LiveTopic(TopicId(1, 2), 1)}
        assert view.at(2).end == 3, "a lower commit returns the view as it is"
        assert view.at(5).topics == {"t": LiveTopic(TopicId(1, 4), 2),
                                     "u": LiveTopic(TopicId(1, 2), 1)}
        pending = view.pending(5)
        assert pending.topics == {"t": LiveTopic(TopicId(1, 4), 2)}
        assert pending.deleting == {"u"} and pending.end == 6
        assert view.at(99).end == 6, "never past the journal's end"
    finally:
        journal.close()


def test_committed_topics_jump_over_a_compacted_prefix(tmp_path):
    journal = _metadata_journal(tmp_path)
    view = CommittedTopics(journal)
    try:
        assert view.at(2).topics.keys() == {"t"}
        journal.compact(5)  # entries 0..4 folded: the view's next entry is gone
        assert view.at(6).topics == {"t": LiveTopic(TopicId(1, 4), 2)}
        assert CommittedTopics(journal).at(5).topics == {"t": LiveTopic(TopicId(1, 4), 2),
                                                          "u": LiveTopic(TopicId(1, 2), 1)}
    finally:
        journal.close()


# -- the topic mirror's decisions --------------------------------------------------------------


def view(end: int, deleting=(), **topics: tuple[tuple[int, int], int]) -> TopicsView:
    return TopicsView(end, {name: LiveTopic(TopicId(*topic_id), partitions)
                            for name, (topic_id, partitions) in topics.items()},
                      frozenset(deleting))


def holds_all(_topic: str, _partitions: int) -> bool:
    return True


def test_the_mirror_opens_what_the_metadata_group_committed():
    metadata = view(10, t=((1, 3), 4), u=((1, 5), 1))
    assert decide(metadata, view(0), holds_all) == [OpenTopic("t", 4, TopicId(1, 3)),
                                                    OpenTopic("u", 1, TopicId(1, 5))]
    assert decide(metadata, view(0), lambda topic, _p: topic == "u") == [
        OpenTopic("u", 1, TopicId(1, 5))], "only topics with a partition in this group"
    assert decide(metadata, view(4, t=((1, 3), 4), u=((1, 5), 1)), holds_all) == []


def test_the_mirror_closes_an_incarnation_the_metadata_group_deleted():
    mine = view(4, t=((1, 3), 4))
    assert decide(view(10), mine, holds_all) == [CloseTopic("t", TopicId(1, 3), 10)]
    # Re-created there: the old one closes first, the new one opens once the close committed.
    recreated = view(10, t=((2, 8), 2))
    assert decide(recreated, mine, holds_all) == [CloseTopic("t", TopicId(1, 3), 10)]
    closing = view(5, deleting={"t"})
    assert decide(recreated, closing, holds_all) == [], "its delete is not committed yet"
    assert decide(recreated, view(5), holds_all) == [OpenTopic("t", 2, TopicId(2, 8))]


def test_a_lagging_copy_of_the_metadata_group_never_closes_what_it_has_not_seen():
    """This leader's metadata copy ends at 3; the group holds an incarnation created at 7 by
    a better-informed leader. Missing from a stale view is not deleted."""
    mine = view(4, t=((2, 7), 4))
    assert decide(view(3), mine, holds_all) == []
    assert decide(view(3, t=((1, 1), 4)), mine, holds_all) == [], "an older incarnation there"
    assert decide(view(8), mine, holds_all) == [CloseTopic("t", TopicId(2, 7), 8)]


def test_a_copy_of_the_metadata_group_behind_the_groups_watermark_decides_nothing():
    """The group closed t's incarnation (1, 3) on a metadata prefix ending at 10: a leader
    whose copy ends at 6 still holds that incarnation live, and must neither re-open it nor
    open anything else its stale copy shows, until its copy reaches 10."""
    closed = TopicsView(12, {}, metadata_end_seen=10)
    stale = view(6, t=((1, 3), 4), u=((1, 5), 1))
    assert decide(stale, closed, holds_all) == []
    assert decide(view(9, t=((1, 3), 4)), closed, holds_all) == []
    assert decide(view(10), closed, holds_all) == [], "caught up: t is deleted there"
    assert decide(view(11, t=((3, 10), 2)), closed, holds_all) == [
        OpenTopic("t", 2, TopicId(3, 10))], "a newer incarnation opens once seen"


# -- preferred leaders --------------------------------------------------------------------------


def leader_state(**overrides) -> RaftState:
    fields = dict(role=Role.LEADER, epoch=5, leader_id=1, log=LogView(end=100),
                  match=MappingProxyType({2: 95, 3: 100}),
                  last_fetch_s=MappingProxyType({2: 9.9, 3: 9.8}))
    fields.update(overrides)
    return RaftState(**fields)


def test_a_leader_hands_over_once_the_preferred_broker_kept_up_steadily():
    rule = BalanceRule(steady_s=2.0, fetch_fresh_s=1.0, lag_entries_max=16)
    since, go = rule.step(None, leader_state(), preferred=2, now=10.0)
    assert since == 10.0 and not go
    since, go = rule.step(since, leader_state(last_fetch_s=MappingProxyType({2: 11.5})), 2, 11.9)
    assert since == 10.0 and not go
    since, go = rule.step(since, leader_state(last_fetch_s=MappingProxyType({2: 11.9})), 2, 12.0)
    assert go


def test_no_hand_over_to_a_lagging_silent_or_learning_broker_and_the_wait_starts_over():
    rule = BalanceRule(steady_s=2.0, fetch_fresh_s=1.0, lag_entries_max=16)
    assert not rule.ready(leader_state(match=MappingProxyType({2: 50})), 2, 10.0), "lagging"
    assert not rule.ready(leader_state(), 2, 11.0), "silent for 1.1 s"
    assert not rule.ready(leader_state(learners=frozenset({2})), 2, 10.0), "a learner"
    assert not rule.ready(leader_state(), 1, 10.0), "already the preferred leader"
    assert not rule.ready(leader_state(role=Role.FOLLOWER), 2, 10.0)
    assert not rule.ready(leader_state(transfer_to=3), 2, 10.0), "handing over already"
    assert not rule.ready(leader_state(match=MappingProxyType({})), 2, 10.0), "never fetched"
    since, _ = rule.step(10.0, leader_state(match=MappingProxyType({2: 50})), 2, 11.0)
    assert since is None, "a broker that fell behind starts its steady wait over"
