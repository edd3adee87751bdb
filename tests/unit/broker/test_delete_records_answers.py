"""DELETE_RECORDS on the real ReplicationNode, ReplicaManager, Log and request handlers (the
network played by hand, as in replication/test_replication_safety.py): what the leader answers,
that the move happens only once committed, how a follower applies it, hostile bodies, and the
snapshot keeping a compacted DeleteRecords."""

from __future__ import annotations

import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from common.kaska.errors import (
    InvalidRequestError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownTopicIdError,
    UnsupportedVersionError,
)
from common.kaska.protocol.codec import BodyWriter
from common.kaska.protocol.delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    PartitionDelete,
    PartitionDeleted,
)
from common.kaska.protocol.fetch import FetchRequest
from common.kaska.protocol.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from common.kaska.protocol.metadata import BrokerInfo
from common.kaska.protocol.topic_id import TopicId as WireTopicId
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.handlers import delete_records, fetch, list_offsets
from services.broker.kafka import fetch as kafka_fetch
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import NONE as KAFKA_NONE
from services.broker.kafka.errors import OFFSET_OUT_OF_RANGE as KAFKA_OUT_OF_RANGE
from services.broker.network.body import RequestBody
from services.broker.replication import raft
from services.broker.replication.snapshot import log_starts
from services.broker.replication.wire.peer_auth import OutOfRangeFieldError
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.replication_bounds import check_fetch_response
from services.broker.storage.log import Log
from tests.unit.broker.replication.test_replication_lease import Handlers
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    answer,
    cluster_node,
    diverging,
    follower_keeping_up,
    leader_with_topic,
    stamped,
)
from tests.unit.broker.replication.test_replication_safety import log as log  # noqa: F401
from tests.unit.broker.storage.batches import SMALL, sized_batch

T_ID = WireTopicId(1, 1)  # topic t: the CREATE_TOPIC at entry 1 of epoch 1
RECORDS = 20  # 500-byte batches of one record: 8 per 4 KiB segment, so 3 segments


class RecordHandlers(Handlers):
    def call(self, handler, request, version: int | None = None):
        payload = request if isinstance(request, bytes) else request.encode()
        ours, theirs = socket.socketpair()
        self._sockets += [ours, theirs]
        ours.sendall(payload)
        version = getattr(request, "version", 0) if version is None else version
        return handler.handle(self.ctx, RequestBody(theirs, len(payload), version=version))

    def delete(self, *partitions: tuple[int, int], topic_id=T_ID
               ) -> tuple[PartitionDeleted, ...]:
        request = DeleteRecordsRequest("t", tuple(PartitionDelete(p, o) for p, o in partitions),
                                       topic_id)
        return DeleteRecordsResponse.decode(self.call(delete_records, request).body).partitions

    def earliest(self) -> int:
        reply = self.call(list_offsets, ListOffsetsRequest("t", 0))
        return ListOffsetsResponse.decode(reply.body).log_start_offset


@pytest.fixture
def leader(log):  # noqa: F811
    """Broker 1 leads epoch 1 with topic t (entry 1) holding RECORDS committed records, and its
    lease; no follower fetches unless a test says so."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    with follower_keeping_up(node):
        for i in range(RECORDS):
            manager.partition("t", 0).append(sized_batch(500, i))
    assert node.state.commit == node.journal.end == 2 + RECORDS and node.holds_lease()
    handlers = RecordHandlers(log, manager)
    try:
        yield SimpleNamespace(node=node, manager=manager, clock=clock, handlers=handlers,
                              log=log, partition=log.partition("t", 0))
    finally:
        handlers.close()
        node.stop()


@pytest.fixture
def in_thread():
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool.submit


def _segment_files(partition) -> list[int]:
    return sorted(int(p.stem) for p in partition.directory.glob("*.log"))


def test_the_leader_moves_the_start_once_committed_and_frees_segments(leader):
    node, partition = leader.node, leader.partition
    assert _segment_files(partition) == [0, 8, 16]
    with follower_keeping_up(node):
        (answered,) = leader.handlers.delete((0, 17))
    assert answered == PartitionDeleted(0, 0, 17)
    entry = node.journal.entry(node.journal.end - 1)
    assert (entry.kind, entry.topic, entry.partition, entry.base_offset) == (
        EntryKind.DELETE_RECORDS, "t", 0, 17)
    assert partition.log_start_offset == 17 and _segment_files(partition) == [16]
    assert leader.handlers.earliest() == 17
    with pytest.raises(OffsetOutOfRangeError):
        leader.handlers.call(fetch, FetchRequest("t", 0, 16, 1 << 20, 0))
    assert node.counters.records_deleted == 17


def test_the_kafka_listener_fetch_refuses_below_the_start_and_names_it(leader):
    with follower_keeping_up(leader.node):
        leader.handlers.delete((0, 17))
    kctx = KafkaContext(broker=leader.handlers.ctx, node_id=1,
                        brokers=(BrokerInfo(1, "127.0.0.1", 19092),), cluster_id="c",
                        rng=random.Random(1), consumer_groups=None)
    below = kafka_fetch._read_partition(kctx, kafka_fetch.Wanted("t", 0, 16, 1 << 20), 1 << 20)
    assert (below.error_code, below.log_start_offset) == (KAFKA_OUT_OF_RANGE, 17)
    at = kafka_fetch._read_partition(kctx, kafka_fetch.Wanted("t", 0, 17, 1 << 20), 1 << 20)
    assert (at.error_code, at.log_start_offset, at.high_watermark) == (KAFKA_NONE, 17, RECORDS)
    assert at.records


def test_minus_one_is_the_high_watermark(leader):
    with follower_keeping_up(leader.node):
        (answered,) = leader.handlers.delete((0, -1))
    assert answered == PartitionDeleted(0, 0, RECORDS)
    assert leader.partition.log_start_offset == RECORDS
    assert _segment_files(leader.partition) == [RECORDS]  # the active segment rolled and went


def test_above_the_high_watermark_is_out_of_range_and_nothing_is_journaled(leader):
    end = leader.node.journal.end
    (answered,) = leader.handlers.delete((0, RECORDS + 1))
    assert answered == PartitionDeleted(0, OffsetOutOfRangeError.code, -1)
    assert leader.node.journal.end == end and leader.partition.log_start_offset == 0


def test_at_or_below_the_current_start_answers_it_and_changes_nothing(leader):
    with follower_keeping_up(leader.node):
        leader.handlers.delete((0, 9))
    end = leader.node.journal.end
    assert leader.handlers.delete((0, 4)) == (PartitionDeleted(0, 0, 9),)
    assert leader.handlers.delete((0, 9)) == (PartitionDeleted(0, 0, 9),)
    assert leader.node.journal.end == end


def test_a_missing_partition_is_answered_per_partition(leader):
    with follower_keeping_up(leader.node):
        answers = leader.handlers.delete((3, 1), (0, 2))
    assert [(a.partition, a.error_code) for a in answers] == [(3, 3), (0, 0)]
    assert answers[1].low_watermark == 2


def test_another_incarnation_is_refused_whole(leader):
    with pytest.raises(UnknownTopicIdError):
        leader.handlers.delete((0, 5), topic_id=WireTopicId(1, 7))
    assert leader.partition.log_start_offset == 0


def test_an_uncommitted_move_is_never_answered_nor_applied(leader, in_thread):
    """Nobody fetches the entry; a successor's entries truncate it: NOT_LEADER, and the start
    never moved (it moves at commit, never at append)."""
    node, partition = leader.node, leader.partition
    waiting = in_thread(lambda: leader.handlers.delete((0, 10)))
    end = 2 + RECORDS
    for _ in range(int(WAIT_S / 0.005)):
        if node.journal.end == end + 1:
            break
        threading.Event().wait(0.005)
    assert node.journal.entry(end).kind is EntryKind.DELETE_RECORDS
    assert partition.log_start_offset == 0 and not waiting.done()
    node._absorb_fetch(2, diverging(2, end + 1, at_epoch=1, end=end))
    node._absorb_fetch(2, answer(2, end + 1, [EntryHeader(end, 2, EntryKind.NOOP)]))
    assert node.state.role is raft.Role.FOLLOWER
    assert waiting.result(WAIT_S) == (PartitionDeleted(0, NotLeaderError.code, -1),)
    assert partition.log_start_offset == 0 and _segment_files(partition) == [0, 8, 16]


def test_a_follower_is_answered_not_leader(log):  # noqa: F811
    node = cluster_node(2, log, Clock())
    try:
        node._absorb_fetch(1, answer(1, 2, [
            EntryHeader(0, 1, EntryKind.NOOP),
            EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1)], leader=1))
        manager = ReplicaManager(node, ("127.0.0.1", 9093), log, ack_timeout_s=WAIT_S)
        handlers = RecordHandlers(log, manager)
        try:
            assert handlers.delete((0, 0)) == (PartitionDeleted(0, NotLeaderError.code, -1),)
        finally:
            handlers.close()
    finally:
        node.stop()


@pytest.mark.parametrize(("body", "version", "error"), [
    (b"", 1, InvalidRequestError),
    (BodyWriter().string("t").i32(1).i64(1).u32(2).u32(0).i64(1).u32(0).i64(2).getvalue(), 1,
     InvalidRequestError),  # a partition named twice
    (BodyWriter().string("t").i32(1).i64(1).u32(1).u32(5000).i64(1).getvalue(), 1,
     InvalidRequestError),  # beyond any topic
    (BodyWriter().string("t").i32(1).i64(1).u32(1).u32(0).i64(-2).getvalue(), 1,
     InvalidRequestError),  # below -1
    (BodyWriter().string("t").i32(1).i64(1).u32(0xFFFFFFFF).getvalue(), 1,
     InvalidRequestError),  # a count the body cannot hold
    (BodyWriter().string("t").i32(-1).i64(-1).u32(0).getvalue(), 1,
     InvalidRequestError),  # version 1 names an incarnation
    (BodyWriter().string("t").u32(0).getvalue() + b"x", 0, InvalidRequestError),  # trailing
    (BodyWriter().string("t").u32(0).getvalue(), 2, UnsupportedVersionError),
    (BodyWriter().string("__offsets").u32(1).u32(0).i64(1).getvalue(), 0, Exception),
])
def test_hostile_bodies_are_refused_and_move_nothing(leader, body, version, error):
    end = leader.node.journal.end
    with pytest.raises(error) as raised:
        leader.handlers.call(delete_records, body, version)
    assert raised.value.code > 0  # a KaskaError: the connection answers it with its code
    assert leader.node.journal.end == end and leader.partition.log_start_offset == 0


def test_an_empty_request_is_answered_empty(leader):
    reply = leader.handlers.call(delete_records, DeleteRecordsRequest("t", (), T_ID))
    assert DeleteRecordsResponse.decode(reply.body).partitions == ()


# -- a follower, compaction and restarts --------------------------------------------------------


def _follower_with_records(log: Log, count: int):  # noqa: F811
    node = cluster_node(2, log, Clock())
    entries = [EntryHeader(0, 1, EntryKind.NOOP),
               EntryHeader(1, 1, EntryKind.CREATE_TOPIC, "t", partitions=1)]
    data = b""
    for i in range(count):
        one = stamped(sized_batch(500, i), i)
        entries.append(EntryHeader(2 + i, 1, EntryKind.BATCH, "t", 0, i, 1,
                                   data_bytes=len(one)))
        data += one
    node._absorb_fetch(1, answer(1, 2 + count, entries, data, leader=1))
    assert node.state.commit == 2 + count
    return node


def test_a_follower_moves_its_start_when_the_entry_commits_and_keeps_it(tmp_path):
    with Log(tmp_path / "data", SMALL) as store:
        node = _follower_with_records(store, RECORDS)
        partition = store.partition("t", 0)
        try:
            index = 2 + RECORDS
            move = EntryHeader(index, 1, EntryKind.DELETE_RECORDS, "t", 0, 12)
            node._absorb_fetch(1, answer(1, index, [move], leader=1))
            assert node.journal.end == index + 1 and partition.log_start_offset == 0
            node._absorb_fetch(1, answer(1, index + 1, leader=1))
            assert partition.log_start_offset == 12 and _segment_files(partition) == [8, 16]
            assert node.counters.records_deleted == 12
            # Compacted away: the snapshot keeps the start.
            assert node.journal.compact(index + 1)
            assert log_starts(node.journal.snapshot) == {("t", 0): 12}
        finally:
            node.stop()
    with Log(tmp_path / "data", SMALL) as store:
        partition = store.partition("t", 0)
        assert partition.log_start_offset == 12
        # A start file lost (the worst case): the snapshot's start is enforced again at open.
        (partition.directory / "log-start").unlink()
    with Log(tmp_path / "data", SMALL) as store:
        assert store.partition("t", 0).log_start_offset == 8
        node = cluster_node(2, store, Clock())
        try:
            assert store.partition("t", 0).log_start_offset == 12
        finally:
            node.stop()


def test_a_delete_records_entry_of_a_replaced_incarnation_moves_nothing(log):  # noqa: F811
    node = _follower_with_records(log, 4)
    try:
        node._absorb_fetch(1, answer(1, 9, [
            EntryHeader(6, 1, EntryKind.DELETE_TOPIC, "t"),
            EntryHeader(7, 1, EntryKind.CREATE_TOPIC, "t", partitions=1),
            EntryHeader(8, 1, EntryKind.DELETE_RECORDS, "t", 0, 3)], leader=1))
        # Entry 8 names the new, empty incarnation: its offset 3 is past its end, clamped.
        assert log.partition("t", 0).log_start_offset == 0
        assert node.journal.entry(8).topic_id == (1, 7)
    finally:
        node.stop()


def test_a_delete_records_entry_from_a_peer_is_range_checked():
    good = ReplicaFetchResponse(1, 1, 3, FetchOutcome.ENTRIES, (
        EntryHeader(2, 1, EntryKind.DELETE_RECORDS, "t", 0, 99),), b"")
    assert check_fetch_response(good) is good
    bad = ReplicaFetchResponse(1, 1, 3, FetchOutcome.ENTRIES, (
        EntryHeader(2, 1, EntryKind.DELETE_RECORDS, "t", 4096, 99),), b"")
    with pytest.raises(OutOfRangeFieldError):
        check_fetch_response(bad)
