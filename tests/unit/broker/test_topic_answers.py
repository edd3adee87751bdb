"""What the topic APIs answer, on the real ReplicationNode, ReplicaManager, Log and request
handlers (the network played by hand, as in replication/test_replication_safety.py):

- the topic list (LIST_TOPICS, and the topics of METADATA, Kaska's and the Kafka listener's)
  holds committed topics only: a leader appends a CREATE_TOPIC and makes its files before a
  majority has it, and truncation may take it away again;
- "already exists" is told only once the existing topic is committed;
- a delete that names an incarnation (DELETE_TOPIC version 1) deletes that one only.
"""

from __future__ import annotations

import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from kafka.protocol.metadata import MetadataRequest as KafkaMetadataRequest

from common.kaska.errors import (
    InvalidPartitionsError,
    NotLeaderError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.create_topic import CreateTopicRequest, CreateTopicResponse
from common.kaska.protocol.delete_topic import DeleteTopicRequest
from common.kaska.protocol.list_topics import ListTopicsRequest, ListTopicsResponse
from common.kaska.protocol.metadata import BrokerInfo, MetadataRequest, MetadataResponse
from common.kaska.protocol.topic_id import TopicId as WireTopicId
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.handlers import create_topic, delete_topic, list_topics, metadata
from services.broker.kafka import metadata as kafka_metadata
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import NONE as KAFKA_NONE
from services.broker.kafka.errors import UNKNOWN_TOPIC_OR_PARTITION
from services.broker.network.body import RequestBody
from services.broker.replication import raft
from services.broker.replication.journal import TopicId
from services.broker.replication.wire.replica_fetch import EntryHeader, EntryKind
from services.broker.storage.log import PARTITIONS_MAX
from tests.unit.broker.replication.test_lease_backpressure import lapse_lease
from tests.unit.broker.replication.test_replication_lease import Handlers
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    answer,
    cluster_node,
    diverging,
    elect,
    follower_keeping_up,
    leader_with_topic,
)
from tests.unit.broker.replication.test_replication_safety import log as log  # noqa: F401
from tests.unit.broker.storage.batches import batch

GHOST = "ghost"  # created by a leader that never gets it committed


class TopicHandlers(Handlers):
    """The real handlers, fed request bodies of a given API version."""

    def __init__(self, log, manager: ReplicaManager) -> None:
        super().__init__(log, manager)
        self.ctx.offsets.forget_topic = lambda _name: None

    def call(self, handler, request, version: int | None = None):
        payload = request.encode()
        ours, theirs = socket.socketpair()
        self._sockets += [ours, theirs]
        ours.sendall(payload)
        version = getattr(request, "version", 0) if version is None else version
        return handler.handle(self.ctx, RequestBody(theirs, len(payload), version=version))

    def listed(self, version: int = 1) -> ListTopicsResponse:
        reply = self.call(list_topics, ListTopicsRequest(version=version))
        return ListTopicsResponse.decode(reply.body, version)

    def metadata_topics(self, *names: str) -> set[str]:
        reply = self.call(metadata, MetadataRequest(names))
        return set(MetadataResponse.decode(reply.body).topics)

    def kafka_metadata(self, *names: str) -> dict[str, int]:
        """The Kafka listener's Metadata v9: topic -> error code (every topic when none are
        named)."""
        kctx = KafkaContext(broker=self.ctx, node_id=1,
                            brokers=(BrokerInfo(1, "127.0.0.1", 19092),), cluster_id="c",
                            rng=random.Random(1), consumer_groups=None)
        wanted = [KafkaMetadataRequest[9].MetadataRequestTopic(name=name) for name in names]
        request = KafkaMetadataRequest[9](topics=wanted or None,
                                          allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False)
        return {topic.name: topic.error_code
                for topic in kafka_metadata.handle(kctx, request).topics}


@pytest.fixture
def leader(log):
    """Broker 1 leads epoch 1 with topic t (entry 1) holding one committed record (entry 2),
    and its lease; no follower fetches unless a test says so."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    with follower_keeping_up(node):
        manager.partition("t", 0).append(batch(b"committed"))
    assert node.state.commit == node.journal.end == 3 and node.holds_lease()
    handlers = TopicHandlers(log, manager)
    try:
        yield SimpleNamespace(node=node, manager=manager, clock=clock, handlers=handlers,
                              log=log)
    finally:
        handlers.close()
        node.stop()


@pytest.fixture
def in_thread():
    """Runs a call on a thread of its own (a request waiting for its commit): its Future."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool.submit


def _wait_for(predicate, what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


def _deposed_by_epoch_2(node) -> None:
    """Broker 2 leads epoch 2 with entries 0..2 as L has them and its NOOP at 3, committed:
    L steps down and truncates whatever it appended at 3."""
    node._absorb_fetch(2, diverging(2, 4, at_epoch=1, end=3))
    node._absorb_fetch(2, answer(2, 4, [EntryHeader(3, 2, EntryKind.NOOP)]))
    assert node.state.role is raft.Role.FOLLOWER and node.state.commit == 4
    assert node.journal.entry(3).kind is EntryKind.NOOP


def test_an_uncommitted_create_is_never_listed_and_truncation_removes_it(leader, in_thread):
    """The leader appends CREATE ghost and makes its files; its followers never fetch it. Its
    LIST_TOPICS (either version) and METADATA, on every broker, leave it out; the create is
    never answered as done; a successor's entries truncate it. Before, both lists read the
    Log, where the create is at once."""
    handlers, node = leader.handlers, leader.node
    created = in_thread(lambda: handlers.call(create_topic, CreateTopicRequest(GHOST, 1)))
    _wait_for(lambda: GHOST in leader.log.topics(), "the leader made ghost's files")
    assert node.journal.entry(3).kind is EntryKind.CREATE_TOPIC and node.state.commit == 3
    assert node.holds_lease() and not created.done()

    for version in (0, 1):
        listed = handlers.listed(version)
        assert GHOST not in listed.topics and listed.topics["t"] == 1
    assert handlers.listed().topic_ids == {"t": WireTopicId(1, 1)}
    assert handlers.metadata_topics() == {"t"}
    assert handlers.metadata_topics(GHOST, "t") == {"t"}
    assert handlers.kafka_metadata() == {"t": KAFKA_NONE}
    assert handlers.kafka_metadata(GHOST) == {GHOST: UNKNOWN_TOPIC_OR_PARTITION}

    _deposed_by_epoch_2(node)
    with pytest.raises(NotLeaderError):
        created.result(WAIT_S)
    assert GHOST not in leader.log.topics()
    assert handlers.metadata_topics() == {"t"}


def _waits_counted(monkeypatch, node) -> list:
    """The threads that waited on the node, one entry per wait, as they begin waiting."""
    waiting = []
    real_wait = node.wait_changed

    def counted_wait(predicate, timeout_s):
        waiting.append(threading.current_thread())
        return real_wait(predicate, timeout_s)

    monkeypatch.setattr(node, "wait_changed", counted_wait)
    return waiting


def test_already_exists_is_told_only_once_the_existing_create_is_committed(leader,
                                                                           monkeypatch,
                                                                           in_thread):
    """A second create of a name whose CREATE is not committed waits for that commit: here
    the leader is deposed and the entry truncated, so both answer NOT_LEADER (retriable: the
    client's retry creates it at the new leader). Before, the second one answered
    TOPIC_ALREADY_EXISTS at once, for a topic that was never to exist."""
    handlers, node = leader.handlers, leader.node
    waiting = _waits_counted(monkeypatch, node)
    first = in_thread(lambda: handlers.call(create_topic, CreateTopicRequest(GHOST, 1)))
    _wait_for(lambda: len(waiting) == 1, "the first create appended and waits")
    assert GHOST in leader.log.topics()
    second = in_thread(lambda: handlers.call(create_topic, CreateTopicRequest(GHOST, 1)))
    _wait_for(lambda: second.done() or len(waiting) == 2, "the second create waits")
    assert not second.done(), f"answered before the commit: {second.exception(0)!r}"
    _deposed_by_epoch_2(node)
    for outcome in (first, second):
        with pytest.raises(NotLeaderError):
            outcome.result(WAIT_S)


def test_already_exists_of_a_committed_topic_is_told_at_once(leader):
    with pytest.raises(TopicAlreadyExistsError):
        leader.handlers.call(create_topic, CreateTopicRequest("t", 1))


def test_a_follower_lists_committed_topics_only_and_sends_list_topics_to_the_leader(log):
    """A follower applies a CREATE_TOPIC (its files) when it appends it, before it learns
    the commit: its METADATA leaves the topic out until then; LIST_TOPICS is answered
    NOT_LEADER naming the leader, whose list is current."""
    node = cluster_node(2, log, Clock())
    try:
        node._absorb_fetch(1, answer(1, 2, [
            EntryHeader(0, 1, EntryKind.NOOP),
            EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1),
            EntryHeader(2, 1, EntryKind.CREATE_TOPIC, GHOST, partitions=2)], leader=1))
        assert node.state.commit == 2 and GHOST in log.topics()
        handlers = TopicHandlers(log, ReplicaManager(node, ("127.0.0.1", 9093), log,
                                                     ack_timeout_s=WAIT_S))
        try:
            assert handlers.metadata_topics() == {"t"}
            with pytest.raises(NotLeaderError) as refused:
                handlers.listed()
            assert refused.value.leader == "127.0.0.1:1"
            node._absorb_fetch(1, answer(1, 3, [], leader=1))
            assert handlers.metadata_topics() == {"t", GHOST}
        finally:
            handlers.close()
    finally:
        node.stop()


def test_a_create_of_a_name_whose_delete_is_not_committed_yet_creates_it_once_it_is(
        leader, monkeypatch, in_thread):
    """d's delete is journaled but no follower has fetched it, so d is still on disk: a
    create of d waits for that delete's commit and then creates d's next incarnation (never
    TOPIC_ALREADY_EXISTS for a topic whose delete was already decided)."""
    node, manager = leader.node, leader.manager
    with follower_keeping_up(node):
        first = manager.create_topic("d", 1)
    waiting = _waits_counted(monkeypatch, node)
    deleted = in_thread(lambda: manager.delete_topic("d", lambda _name: None))
    _wait_for(lambda: len(waiting) == 1, "the delete journaled and waits for its commit")
    created = in_thread(lambda: manager.create_topic("d", 2))
    _wait_for(lambda: created.done() or len(waiting) == 2, "the create waits")
    assert not created.done(), f"answered before the delete's commit: {created.exception(0)!r}"
    assert "d" in leader.log.topics()
    with follower_keeping_up(node):
        second = created.result(WAIT_S)
        deleted.result(WAIT_S)
    assert second != first
    assert manager.committed_topics()["d"].topic_id == second
    assert leader.log.topics()["d"] == 2


def test_already_exists_at_a_leader_of_a_later_epoch_is_told_without_waiting(log):
    """The leader of epoch 2 holds t from epoch 1 and its own NOOP(2) last, all committed:
    "already exists" rests on that NOOP, committed, so it is told at once. (An ack timeout
    of 0.2 s: an answer that waited for an entry that never commits would be
    NOT_ENOUGH_REPLICAS.)"""
    clock = Clock()
    node = cluster_node(1, log, clock)
    try:
        node._absorb_fetch(2, answer(1, 2, [
            EntryHeader(0, 1, EntryKind.NOOP),
            EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1)]))
        elect(node, clock)
        with follower_keeping_up(node):
            _wait_for(lambda: node.state.commit == 3, "epoch 2's NOOP committed")
        assert [node.journal.epoch_of(index) for index in range(3)] == [1, 1, 2]
        impatient = ReplicaManager(node, ("127.0.0.1", 9092), log, ack_timeout_s=0.2)
        with pytest.raises(TopicAlreadyExistsError):
            impatient.create_topic("t", 1)
    finally:
        node.stop()


# -- a delete names its incarnation -----------------------------------------------------------


def test_a_delete_naming_an_incarnation_leaves_a_recreated_topic_alone(leader):
    """delete(d, first) is answered; d is created again by someone else; the retry of
    delete(d, first) -- its answer was lost -- is UNKNOWN_TOPIC_ID and d's new incarnation
    stays. A delete of an incarnation already gone is done, with nothing deleted."""
    handlers, node = leader.handlers, leader.node
    with follower_keeping_up(node):
        first = CreateTopicResponse.decode(
            handlers.call(create_topic, CreateTopicRequest("d", 1)).body, 1).topic_id
        handlers.call(delete_topic, DeleteTopicRequest("d", first))
        assert "d" not in handlers.listed().topics
        second = CreateTopicResponse.decode(
            handlers.call(create_topic, CreateTopicRequest("d", 2)).body, 1).topic_id
        assert second != first and handlers.listed().topic_ids["d"] == second
        with pytest.raises(UnknownTopicIdError):
            handlers.call(delete_topic, DeleteTopicRequest("d", first))
        assert handlers.listed().topics["d"] == 2
        assert leader.manager.committed_topics()["d"].topic_id == TopicId(*second)
        end = node.journal.end
        handlers.call(delete_topic, DeleteTopicRequest("gone", first))  # never existed: done
        assert node.journal.end == end, "nothing journaled"
        handlers.call(delete_topic, DeleteTopicRequest("d", second))
        assert "d" not in handlers.listed().topics and "d" not in leader.log.topics()


def test_an_unnamed_delete_still_deletes_the_live_incarnation(leader):
    """Version 0 (and Kafka's DeleteTopics): whatever incarnation is live."""
    handlers = leader.handlers
    with follower_keeping_up(leader.node):
        handlers.call(create_topic, CreateTopicRequest("d", 1))
        handlers.call(delete_topic, DeleteTopicRequest("d"))
    assert "d" not in handlers.listed().topics


def test_already_exists_is_told_by_a_leader_whose_lease_lapsed(leader):
    """Topic writes wait for their commit, so they never need the lease (`lease=False`):
    a lapsed lease must not turn TOPIC_ALREADY_EXISTS of a committed topic into NOT_LEADER."""
    lapse_lease(leader)
    with pytest.raises(TopicAlreadyExistsError):
        leader.manager.create_topic("t", 1)


def test_the_partition_counts_at_the_bounds_are_taken_and_those_past_them_refused(leader):
    """1..PARTITIONS_MAX: a count outside is refused before anything is journaled (a
    CREATE_TOPIC of 0 partitions would reach every follower)."""
    node, manager = leader.node, leader.manager
    for refused in (0, PARTITIONS_MAX + 1):
        end = node.journal.end
        with pytest.raises(InvalidPartitionsError):
            manager.journal_create(f"refused{refused}", refused)
        assert node.journal.end == end, f"{refused} partitions journaled"
    entry, _epoch = manager.journal_create("widest", PARTITIONS_MAX)
    assert entry.kind is EntryKind.CREATE_TOPIC and entry.partitions == PARTITIONS_MAX
    assert leader.log.topics()["widest"] == PARTITIONS_MAX


def _stale_on_disk(leader, monkeypatch, freed_before_attempt: int | None) -> list[int]:
    """Topic "stale" is on disk here but in no committed entry (as a create truncated away
    leaves it, until its files go): every create attempt finds it, unless its files are
    removed before attempt `freed_before_attempt` (a delete committed meanwhile). The
    attempts' numbers, as they are made."""
    leader.log.create_topic("stale", 1)
    attempts = []
    real_journal_create = leader.manager.journal_create

    def journal_create(name, partitions, opens=None):
        attempts.append(len(attempts) + 1)
        if attempts[-1] == freed_before_attempt:
            leader.log.delete_topic(name)
        return real_journal_create(name, partitions, opens)

    monkeypatch.setattr(leader.manager, "journal_create", journal_create)
    return attempts


def test_a_create_tries_three_times_for_a_name_held_on_disk_then_says_it_exists(
        leader, monkeypatch):
    """Once for an uncommitted delete, once more for a concurrent re-create: a third time,
    and no more, since every attempt waits for the journal's commit."""
    attempts = _stale_on_disk(leader, monkeypatch, freed_before_attempt=None)
    with pytest.raises(TopicAlreadyExistsError, match="neither committed"):
        leader.manager.create_topic("stale", 1)
    assert attempts == [1, 2, 3]


def test_a_create_whose_name_is_freed_before_its_third_attempt_creates_it(leader,
                                                                        monkeypatch):
    attempts = _stale_on_disk(leader, monkeypatch, freed_before_attempt=3)
    with follower_keeping_up(leader.node):
        topic_id = leader.manager.create_topic("stale", 1)
    assert attempts == [1, 2, 3]
    assert leader.manager.committed_topics()["stale"].topic_id == topic_id


# -- a delete at a leader whose lease lapsed, raced, or deposed ------------------------------------


def test_a_delete_is_carried_out_by_a_leader_whose_lease_lapsed(leader, in_thread):
    """As a create: a delete waits for its commit, so late confirmations (a lapsed lease)
    must not turn it into NOT_LEADER; nor the data group's close of a deleted incarnation
    (journal_delete), which a leader journals without waiting."""
    node, manager = leader.node, leader.manager
    with follower_keeping_up(node):
        manager.create_topic("d", 1)
    lapse_lease(leader)
    end = node.journal.end
    deleted = in_thread(lambda: manager.delete_topic("d", lambda _name: None))
    _wait_for(lambda: deleted.done() or node.journal.end == end + 1, "the delete journaled")
    assert not deleted.done(), f"refused: {deleted.exception(0)!r}"
    with follower_keeping_up(node):
        entry = deleted.result(WAIT_S)
    assert entry.kind is EntryKind.DELETE_TOPIC and "d" not in manager.committed_topics()
    lapse_lease(leader)
    closed = manager.journal_delete("t")
    assert closed.kind is EntryKind.DELETE_TOPIC and manager.pending_deletes() == ["t"]


@pytest.mark.parametrize("named", [True, False])
def test_a_delete_whose_topic_another_delete_took_meanwhile_decides_afresh(leader, named):
    """Two deletes of d: each finds d live, then journals its DELETE_TOPIC. The second finds d
    gone under the lock the appends take and decides again, on the journal as it is now:
    done, for a delete naming the incarnation the other one deleted; UNKNOWN_TOPIC_OR_PARTITION
    for an unnamed one (Kafka's DeleteTopics) -- one DELETE_TOPIC journaled, never two."""
    node, manager = leader.node, leader.manager
    others = []

    def the_other_delete_lands_first(name: str) -> None:
        if not others:
            others.append(manager.journal_delete(name))

    with follower_keeping_up(node):
        first = manager.create_topic("d", 1)
        if named:
            assert manager.delete_topic("d", the_other_delete_lands_first, first) is None
        else:
            with pytest.raises(UnknownTopicOrPartitionError, match="no topic"):
                manager.delete_topic("d", the_other_delete_lands_first)
    assert len(others) == 1, "the scenario: the other delete journaled first"
    deletes = [entry for entry in node.journal.entries() if entry.kind is EntryKind.DELETE_TOPIC]
    assert deletes == others and "d" not in manager.committed_topics()


def test_a_delete_whose_append_is_fenced_leaves_the_topic_writable(leader):
    """The leader is deposed between its checks and the DELETE_TOPIC's append, which the
    journal fences (NotLeaderError): nothing is journaled, so t must not stay refused here as
    "being deleted" -- this broker leads t again after the next election, and takes writes."""
    node, manager, clock = leader.node, leader.manager, leader.clock
    with pytest.raises(NotLeaderError):
        manager.delete_topic("t", lambda _name: _deposed_by_epoch_2(node))
    assert not any(entry.kind is EntryKind.DELETE_TOPIC for entry in node.journal.entries())
    assert manager.pending_deletes() == []
    elect(node, clock)
    with follower_keeping_up(node):
        appended = manager.partition("t", 0).append(batch(b"after"))
    assert appended.base_offset == 1


def test_the_topic_list_counts_a_lease_refusal_only_where_the_lease_lapsed(leader):
    """`kaska_leader_lease_refusals_total` counts a leader refusing for want of its lease, not
    a follower sending LIST_TOPICS to the leader it names."""
    node, handlers = leader.node, leader.handlers
    lapse_lease(leader)
    with pytest.raises(NotLeaderError, match="no leader lease"):
        handlers.listed()
    assert handlers.counters.lease_refusals == 1
    _deposed_by_epoch_2(node)
    with pytest.raises(NotLeaderError) as refused:
        handlers.listed()
    assert refused.value.leader == "127.0.0.1:1", "names broker 2, the leader"
    assert handlers.counters.lease_refusals == 1
