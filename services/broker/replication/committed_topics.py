"""CommittedTopics: the live topics of a journal's committed prefix, each with its incarnation
(TopicId) and partition count, kept up to date incrementally.

What the groups of a broker read of one another (docs/replication.md, "Leadership spread over
the brokers"): a data group's topic mirror reads the metadata group's committed topics (what to
open and close), and a create waits until each data group's committed topics hold the new
incarnation. Only the committed prefix counts: it is the same on every broker (Raft's log
matching), so a decision taken on it never has to be undone.

`at(commit)` replays the entries from where the last call stopped up to `commit` (CREATE_TOPIC
adds or replaces a topic, DELETE_TOPIC removes it); it jumps to the journal's snapshot when
the journal was compacted (or a leader's snapshot installed) past that point. Committed entries
never change (a snapshot installed over them holds the same prefix, Raft's log matching), so
nothing else can invalidate the view; a `commit` below its end returns it as it is.

`pending(commit)` is the same view carried through the uncommitted tail too, and names the
topics whose DELETE_TOPIC is in that tail: what a leader appended but has not seen committed.

Both views carry `metadata_end_seen`, the largest `JournalEntry.metadata_end_seen` of the
entries they cover, the snapshot's included (journal.py, snapshot.py): in a data group, the
longest metadata group prefix its topic mirror's entries were decided on. It never decreases
along a journal.

Thread-safe: one lock around the cached view; the journal takes its own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from services.broker.replication.journal import Journal, JournalEntry, TopicId
from services.broker.replication.wire.replica_fetch import EntryKind


@dataclass(frozen=True, slots=True)
class LiveTopic:
    topic_id: TopicId
    partitions: int


@dataclass(frozen=True, slots=True)
class TopicsView:
    """Live topics after the entries below `end`; `deleting`: topics whose DELETE_TOPIC lies in
    the uncommitted tail (only for `pending`); `metadata_end_seen`: see the module docstring."""

    end: int
    topics: dict[str, LiveTopic]
    deleting: frozenset[str] = frozenset()
    metadata_end_seen: int = 0


class CommittedTopics:
    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._lock = threading.Lock()
        self._view = _UNREAD

    def at(self, commit: int) -> TopicsView:
        """The live topics of the entries below `commit` (clamped to the journal's end)."""
        with self._lock:
            view = self._advanced(self._view, min(commit, self._journal.end))
            self._view = view
            return view

    def pending(self, commit: int) -> TopicsView:
        """The committed view carried through the whole journal, uncommitted tail included."""
        committed = self.at(commit)
        tail = self._journal.entries(committed.end)
        if tail and tail[0].index != committed.end:
            return self.pending(commit)  # compacted meanwhile: read again
        topics = dict(committed.topics)
        deleting: set[str] = set()
        metadata_end_seen = committed.metadata_end_seen
        for entry in tail:
            _apply(topics, entry)
            metadata_end_seen = max(metadata_end_seen, entry.metadata_end_seen)
            if entry.kind is EntryKind.DELETE_TOPIC:
                deleting.add(entry.topic)
            elif entry.kind is EntryKind.CREATE_TOPIC:
                deleting.discard(entry.topic)
        return TopicsView(committed.end + len(tail), topics, frozenset(deleting),
                          metadata_end_seen)

    def _advanced(self, view: TopicsView, commit: int) -> TopicsView:
        journal = self._journal
        while True:
            if view.end < journal.start:
                view = _from_snapshot(journal)
            if commit <= view.end:
                return view
            entries = journal.entries(view.end, commit)
            if entries and entries[0].index == view.end:
                break
            view = _UNREAD  # compacted or replaced between the reads: from its snapshot
        topics = dict(view.topics)
        metadata_end_seen = view.metadata_end_seen
        for entry in entries:
            _apply(topics, entry)
            metadata_end_seen = max(metadata_end_seen, entry.metadata_end_seen)
        return TopicsView(view.end + len(entries), topics, metadata_end_seen=metadata_end_seen)


_UNREAD = TopicsView(-1, {})


def _from_snapshot(journal: Journal) -> TopicsView:
    snapshot = journal.snapshot
    return TopicsView(snapshot.end, {
        topic.name: LiveTopic(TopicId(topic.id_epoch, topic.id_index), topic.partitions)
        for topic in snapshot.topics}, metadata_end_seen=snapshot.metadata_end_seen)


def _apply(topics: dict[str, LiveTopic], entry: JournalEntry) -> None:
    if entry.kind is EntryKind.CREATE_TOPIC:
        assert entry.topic_id is not None, "the journal names every CREATE_TOPIC's incarnation"
        topics[entry.topic] = LiveTopic(entry.topic_id, entry.partitions)
    elif entry.kind is EntryKind.DELETE_TOPIC:
        topics.pop(entry.topic, None)
