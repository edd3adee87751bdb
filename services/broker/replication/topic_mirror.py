"""TopicMirror: a data group's leader opens and closes, in its own journal, the topics the
metadata group created and deleted (docs/replication.md, "Leadership spread over the brokers").

Topics are created and deleted in the metadata group (group 0) only, so a create or delete
never writes through several leaders. Each data group's leader reads the metadata group's
committed topics on its own broker (CommittedTopics: the same prefix on every broker) and
reconciles its journal with them, as Kafka's brokers follow the metadata log:

- a topic of the metadata group that has partitions in this group and is not live here gets a
  CREATE_TOPIC that carries the metadata group's incarnation (journal_record.py: the topic's id
  is the same in every group), unless a DELETE_TOPIC of the name is still uncommitted here (the next
  incarnation waits for the old one to be gone, as a metadata group's create does);
- a topic live here whose incarnation the metadata group has deleted gets a DELETE_TOPIC. An
  incarnation is deleted when its id's index lies in the metadata group's committed prefix and
  that prefix does not hold it live. Merely missing is not enough: a leader whose copy of the
  metadata group lags must never close a topic a better-informed leader opened.

The same lag must never re-open what was closed: a leader whose copy of the metadata group
is behind (just restarted with a commit index persisted a while ago, or a follower of the
metadata group that has not heard of the latest commit yet) still sees an incarnation the
group's previous leader closed as live. So a data group remembers, in its own journal, how
far into the metadata group its decisions reached: a DELETE_TOPIC carries the end of the
metadata prefix it was decided on, a CREATE_TOPIC the incarnation it opens (whose CREATE lies
in that prefix). The largest of these, the group's watermark (`TopicsView.metadata_end_seen`,
kept in snapshots), only grows, and `decide` does nothing while this broker's copy of the
metadata group ends below it. Every committed prefix at or past the watermark holds the
deletes the group acted on, and an incarnation once deleted is never live again (its id is
its CREATE's position), so the group never opens an incarnation it closed, nor one whose
delete lies below its watermark. It waits instead, until this broker's copy catches up.

Inside the data group, CREATE_TOPIC and DELETE_TOPIC then do what they do in any journal
(entry_effects.py, reconcile.py, snapshots): a DELETE removes only the incarnation it names.

`decide` is pure: (metadata view, this group's view, placement) -> the entries to append.
`TopicMirror` is its edge: a thread per data group that wakes when the metadata group's commit
or this group's leadership changes (and every `interval_s`), and appends what `decide` says
while this broker leads the group. An append refused (a lost leadership, a full disk, a topic
whose old incarnation is still on disk) is simply decided again on the next round.

Thread-safety: `decide` is pure; the mirror's thread is the only one that appends CREATE and
DELETE entries to its group's journal; the replica manager serialises them with produce.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from common.kaska.errors import KaskaError
from services.broker.replication.committed_topics import CommittedTopics, TopicsView
from services.broker.replication.journal import TopicId
from services.broker.replication.raft import Role
from services.broker.storage.errors import StorageFullError

log = logging.getLogger(__name__)

MIRROR_INTERVAL_S_DEFAULT = 0.25


@dataclass(frozen=True, slots=True)
class OpenTopic:
    topic: str
    partitions: int
    topic_id: TopicId


@dataclass(frozen=True, slots=True)
class CloseTopic:
    topic: str
    topic_id: TopicId
    metadata_end: int  # the end of the metadata prefix that shows it deleted


MirrorAction = OpenTopic | CloseTopic


def decide(metadata: TopicsView, mine: TopicsView,
           holds_any: Callable[[str, int], bool]) -> list[MirrorAction]:
    """What this data group appends: `metadata` is the metadata group's committed view,
    `mine` this group's pending view (uncommitted tail included), `holds_any(topic,
    partitions)` whether this group replicates a partition of such a topic. Nothing while
    `metadata` ends below the group's watermark (see the module docstring)."""
    if metadata.end < mine.metadata_end_seen:
        return []
    actions: list[MirrorAction] = []
    for name, live in sorted(mine.topics.items()):
        wanted = metadata.topics.get(name)
        if wanted is not None and wanted.topic_id == live.topic_id:
            continue
        if live.topic_id.index < metadata.end:  # its CREATE is committed there: deleted since
            actions.append(CloseTopic(name, live.topic_id, metadata.end))
    for name, wanted in sorted(metadata.topics.items()):
        if name in mine.topics or name in mine.deleting:
            continue
        if holds_any(name, wanted.partitions):
            actions.append(OpenTopic(name, wanted.partitions, wanted.topic_id))
    return actions


class TopicMirror:
    def __init__(self, group: int, metadata_node, metadata_topics: CommittedTopics, node,
                 topics: CommittedTopics, replicas, holds_any: Callable[[str, int], bool],
                 interval_s: float = MIRROR_INTERVAL_S_DEFAULT) -> None:
        """`metadata_node`, `node`: the ReplicationNodes of group 0 and of this group;
        `replicas`: this group's ReplicaManager."""
        self.group = group
        self._metadata_node = metadata_node
        self._metadata_topics = metadata_topics
        self._node = node
        self._topics = topics
        self._replicas = replicas
        self._holds_any = holds_any
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.opened = 0  # CREATE_TOPIC entries appended (tests, logs)
        self.closed = 0  # DELETE_TOPIC entries appended
        self.held_back = 0  # rounds this broker's metadata copy was below the group's watermark
        self._behind = False  # the last round was held back (logged once per episode)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kaska-topic-mirror-g{group}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        seen = None
        while not self._stop.is_set():
            metadata_commit = self._metadata_node.state.commit
            state = self._node.state
            now = (metadata_commit, state.epoch, state.role, state.commit)
            if now == seen:
                # Nothing new: wait for the metadata group's commit to move (or the interval,
                # which also covers this group's own commits and leadership).
                self._metadata_node.wait_changed(
                    functools.partial(self._moved_from, metadata_commit), self._interval_s)
            seen = now
            try:
                self.round_once()
            except (KaskaError, StorageFullError) as error:
                log.info("topic mirror of group %d: %s; again in a moment", self.group, error)
                self._stop.wait(self._interval_s)

    def _moved_from(self, metadata_commit: int) -> bool:
        return self._stop.is_set() or self._metadata_node.state.commit != metadata_commit

    def round_once(self) -> list[MirrorAction]:
        """One reconciliation, if this broker leads the group: the actions taken."""
        state = self._node.state
        if state.role is not Role.LEADER:
            return []
        metadata = self._metadata_topics.at(self._metadata_node.state.commit)
        mine = self._topics.pending(self._node.state.commit)
        for name in self._replicas.pending_deletes():
            if name not in mine.deleting:
                self._replicas.forget_delete(name)  # committed (or cut): produce may resume
        self._note_behind(metadata.end, mine.metadata_end_seen)
        actions = decide(metadata, mine, self._holds_any)
        for action in actions:
            self._take(action)
        return actions

    def _note_behind(self, metadata_end: int, watermark: int) -> None:
        """Count and log (once per episode) the rounds `decide` sits out: a mirror that waits
        for its broker's copy of the metadata group must not look like one that hangs."""
        behind = metadata_end < watermark
        if behind:
            self.held_back += 1
            if not self._behind:
                log.info("group %d: this broker's copy of the metadata group ends at %d, below "
                         "the %d the group's topic entries were decided on; waiting for it to "
                         "catch up", self.group, metadata_end, watermark)
        self._behind = behind

    def _take(self, action: MirrorAction) -> None:
        if isinstance(action, OpenTopic):
            self._replicas.journal_create(action.topic, action.partitions,
                                          opens=action.topic_id)
            self.opened += 1
            log.info("group %d: opened topic %r (incarnation %s)", self.group, action.topic,
                     tuple(action.topic_id))
        else:
            self._replicas.journal_delete(action.topic, metadata_end=action.metadata_end)
            self.closed += 1
            log.info("group %d: closed topic %r (incarnation %s, deleted in the metadata "
                     "group)", self.group, action.topic, tuple(action.topic_id))
