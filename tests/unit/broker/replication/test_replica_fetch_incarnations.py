"""The leader's REPLICA_FETCH answer across a topic's delete and re-create, on the real
ReplicationNode, ReplicaManager, Journal and Log objects and the handler's own answer code
(`replica_fetch_answer`): a follower that lagged across the delete and re-create is sent the old
incarnation's batches as SKIPPED -- never "not yet published" for ever, never an error, never
the new incarnation's bytes as the old entry's -- and, applying the answer, holds exactly the
new incarnation's records. The bytes travel as they would on the wire (the prefix, then the
slices read back from the segment files, as sendfile sends them)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from common.kaska.errors import UnknownServerError
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.handlers.replica_fetch import replica_fetch_answer
from services.broker.replication.follower_progress import FollowerProgress
from services.broker.replication.wire.replica_fetch import (
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.storage.log import Log
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    cluster_node,
    confirm_lease,
    elect,
    fetch_everything,
    follower_keeping_up,
)
from tests.unit.broker.storage.batches import SMALL, batch, new_producer_id, records

LAGGING = 3  # broker 3 is paused; broker 2 keeps up (follower_keeping_up)


@pytest.fixture
def logs(tmp_path):
    with Log(tmp_path / "leader", SMALL) as leader, Log(tmp_path / "follower", SMALL) as other:
        yield leader, other


def wire(response: ReplicaFetchResponse, slices) -> ReplicaFetchResponse:
    """The answer as the follower reads it: prefix, then the batch bytes from the files."""
    data = b"".join(os.pread(piece.fd, piece.nbytes, piece.position) for piece in slices)
    return ReplicaFetchResponse.decode(response.encode_prefix() + data)


def fetch_as(node, follower_id: int, follower_journal) -> tuple[ReplicaFetchResponse, list]:
    request = ReplicaFetchRequest(follower_id, node.state.epoch, follower_journal.end,
                                  follower_journal.last_epoch, 1 << 20, 0)
    return replica_fetch_answer(node, node._log, request)


def produce(manager: ReplicaManager, topic: str, *payloads: bytes) -> None:
    producer = new_producer_id()
    with follower_keeping_up(manager.node):
        for sequence, payload in enumerate(payloads):
            confirm_lease(manager.node)
            manager.partition(topic, 0).append(batch(payload, producer_id=producer,
                                                     sequence=sequence))


def lagged_across_recreate(leader_log: Log, old: list[bytes], new: list[bytes]):
    """Broker 1 leads; broker 3 fetched up to the first CREATE of `d`, then paused while `old`
    was produced to `d`, `d` deleted and created again, and `new` produced to it."""
    clock = Clock()
    leader = cluster_node(1, leader_log, clock)
    elect(leader, clock)
    manager = ReplicaManager(leader, ("127.0.0.1", 9092), leader_log, ack_timeout_s=WAIT_S)
    with follower_keeping_up(leader):
        manager.create_topic("d", 1)
    paused_at = leader.journal.end
    produce(manager, "d", *old)
    with follower_keeping_up(leader):
        manager.delete_topic("d", lambda _name: None)
        manager.create_topic("d", 1)
    produce(manager, "d", *new)
    assert leader.journal.incarnation("d").index > paused_at, "the scenario: a re-create"
    return leader, paused_at


def follower_at(follower_log: Log, leader, upto: int):
    """Broker 3, a real node, holding the leader's journal below `upto` (fetched then)."""
    follower = cluster_node(LAGGING, follower_log, leader._clock)
    request = ReplicaFetchRequest(LAGGING, leader.state.epoch, 0, 0, 1 << 20, 0)
    response, slices = replica_fetch_answer(leader, leader._log, request)
    kept = tuple(header for header in response.entries if header.index < upto)
    assert kept[-1].index == upto - 1 and all(h.kind is not EntryKind.BATCH for h in kept)
    follower._absorb_fetch(1, wire(ReplicaFetchResponse(
        response.epoch, response.leader_id, response.commit, FetchOutcome.ENTRIES, kept), []), 0)
    assert follower.journal.end == upto
    return follower


@pytest.mark.parametrize("old, new", [
    # The new incarnation ends below the old entries' offsets ("not yet published" for ever).
    ([b"a" * 40, b"b" * 40, b"c" * 40], [b"x" * 40]),
    # It is longer, with batches of another size (the journal and the log "disagree").
    ([b"a" * 40, b"b" * 40], [b"x" * 90, b"y" * 90, b"z" * 90]),
    # It is longer, with batches of the same size (the new bytes served as the old entry's).
    ([b"a" * 40, b"b" * 40], [b"x" * 40, b"y" * 40, b"z" * 40]),
], ids=["new-shorter", "new-longer-other-sizes", "new-longer-same-sizes"])
def test_a_follower_lagging_across_a_recreate_catches_up_to_the_new_incarnation(logs, old, new):
    leader_log, follower_log = logs
    leader, paused_at = lagged_across_recreate(leader_log, old, new)
    follower = None
    try:
        follower = follower_at(follower_log, leader, paused_at)
        response, slices = fetch_as(leader, LAGGING, follower.journal)
        kinds = [(header.kind, header.base_offset) for header in response.entries
                 if header.topic == "d" and header.kind in (EntryKind.BATCH, EntryKind.SKIPPED)]
        assert kinds == [(EntryKind.SKIPPED, offset) for offset in range(len(old))] + \
            [(EntryKind.BATCH, offset) for offset in range(len(new))]
        assert response.entries[-1].index == leader.journal.end - 1, "the whole tail, at once"
        follower._absorb_fetch(1, wire(response, slices), follower.journal.end)
        assert follower.journal.end == leader.journal.end
        assert [value for _, value in records(follower_log.partition("d", 0).read_bytes(
            0, 10**6))] == new, "exactly the new incarnation's records"
        assert follower_log.partition("d", 0).read_bytes(0, 10**6) == \
            leader_log.partition("d", 0).read_bytes(0, 10**6), "byte for byte"
    finally:
        leader.stop()
        if follower is not None:
            follower.stop()


def test_a_batch_of_the_current_incarnation_in_the_log_but_not_published_ends_the_answer(logs):
    """The one case where an answer stops early: the entry is the current incarnation's and its
    bytes are not visible yet (journaled a moment before publishing)."""
    leader_log, _ = logs
    leader, _ = lagged_across_recreate(leader_log, [b"a" * 40], [b"x" * 40, b"y" * 40])
    try:
        partition = leader_log.partition("d", 0)
        last = leader.journal.entries(leader.journal.end - 1)[0]
        assert last.kind is EntryKind.BATCH and last.base_offset == 1
        partition.truncate_to(1)  # as if the last batch were journaled but not yet published
        response, slices = replica_fetch_answer(
            leader, leader_log, ReplicaFetchRequest(LAGGING, leader.state.epoch, 0, 0,
                                                    1 << 20, 0))
        assert response.entries[-1].index == last.index - 1
        assert sum(piece.nbytes for piece in slices) == sum(
            header.data_bytes for header in response.entries)
    finally:
        leader.stop()


def test_an_unpublished_batch_ends_the_answer_even_before_published_entries_after_it(logs):
    """An answer is a prefix of the journal: a follower appends its entries in order, so the
    unpublished batch is neither skipped nor sent as SKIPPED while later entries (here another
    topic's batch, published) go ahead of it."""
    leader_log, _ = logs
    leader, _ = lagged_across_recreate(leader_log, [b"a" * 40], [b"x" * 40, b"y" * 40])
    try:
        manager = ReplicaManager(leader, ("127.0.0.1", 9092), leader_log, ack_timeout_s=WAIT_S)
        with follower_keeping_up(leader):
            manager.create_topic("e", 1)
        unpublished = [entry for entry in leader.journal.entries(0)
                       if entry.kind is EntryKind.BATCH and entry.topic == "d"][-1]
        produce(manager, "e", b"e" * 40)
        later = leader.journal.entries(leader.journal.end - 1)[0]
        assert later.topic == "e" and later.kind is EntryKind.BATCH
        assert unpublished.index < later.index, "the scenario: a published entry after it"
        leader_log.partition("d", 0).truncate_to(unpublished.base_offset)
        response, slices = replica_fetch_answer(
            leader, leader_log, ReplicaFetchRequest(LAGGING, leader.state.epoch, 0, 0,
                                                    1 << 20, 0))
        assert [header.index for header in response.entries] == \
            list(range(unpublished.index)), "every entry before it, none from it on"
        assert sum(piece.nbytes for piece in slices) == sum(
            header.data_bytes for header in response.entries)
    finally:
        leader.stop()


def test_a_batch_the_log_disagrees_with_is_refused_not_sent(logs):
    """Within one incarnation, a journal entry whose bytes the log holds otherwise is an
    error, never bytes sent as something else."""
    leader_log, _ = logs
    leader, _ = lagged_across_recreate(leader_log, [b"a" * 40], [b"x" * 40, b"y" * 40])
    try:
        last = leader.journal.entries(leader.journal.end - 1)[0]
        # A journal entry the log holds otherwise (a bug's effect, made by hand).
        leader.journal._entries[-1] = replace(last, batch_bytes=last.batch_bytes + 7)
        with pytest.raises(UnknownServerError):
            replica_fetch_answer(leader, leader_log, ReplicaFetchRequest(
                LAGGING, leader.state.epoch, last.index, last.epoch, 1 << 20, 0))
    finally:
        leader.stop()


def test_a_stalled_follower_is_counted_once_per_episode(logs):
    leader_log, _ = logs
    leader, _ = lagged_across_recreate(leader_log, [b"a" * 40], [b"x" * 40])
    try:
        leader.follower_progress = FollowerProgress(stall_after_s=2.0)
        stuck = leader.journal.end - 1
        # A follower whose fetches never get past `stuck` (as if it could not apply them).
        request = ReplicaFetchRequest(LAGGING, leader.state.epoch, stuck,
                                      leader.journal.epoch_of(stuck - 1), 1, 0)
        for _ in range(3):
            replica_fetch_answer(leader, leader_log, request)
            leader._clock.now_s += 0.5
            fetch_everything(leader)  # broker 2 keeps the leader's quorum
        assert leader.counters.followers_stalled == 0, "not stuck for 2 s yet"
        for _ in range(6):
            replica_fetch_answer(leader, leader_log, request)
            leader._clock.now_s += 0.5
            fetch_everything(leader)
        assert leader.counters.followers_stalled == 1, "once, however long it lasts"
        assert leader.follower_progress.stalled() == {LAGGING: stuck}
        caught_up = ReplicaFetchRequest(LAGGING, leader.state.epoch, leader.journal.end,
                                        leader.journal.last_epoch, 1, 0)
        replica_fetch_answer(leader, leader_log, caught_up)
        assert leader.follower_progress.stalled() == {}
    finally:
        leader.stop()
