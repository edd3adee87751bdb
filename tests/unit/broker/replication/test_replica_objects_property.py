"""Replication on the real objects -- ReplicationNode, ReplicaManager, Log and the REPLICA_FETCH
handler's answer code -- stepped in one thread on a simulated clock and network
(`replica_objects_sim.py`), where `test_raft_property.py` steps the pure state machine:

- directed: a follower paused across produce, delete and re-create of a topic (the new
  incarnation ending below the old batches' offsets, across them, above them with batches of
  the same size and of other sizes), thawed: it converges, the re-created topic holds exactly
  its own records everywhere, and the idle cluster long-polls. The same scenarios against the
  handler as it was before it checked the incarnation of an entry (`incarnation_blind_answer`)
  fail: the follower spins on empty answers, is served the new incarnation's bytes as the old
  entry's, or the handler raises UnknownServerError;
- properties: 3 and 5 brokers under topic churn of the same names, paused and lagging
  followers, lost and late answers, partitions, restarts on the same directory and journal
  compaction with snapshot installs; the checks of the simulator (committed prefixes agree, an
  acknowledgement names its committed entry, acknowledged writes survive in their incarnation)
  plus convergence once the faults stop and no spin (no follower behind answered empty again
  and again; an idle cluster only long-polls);
- a follower behind a snapshot that names a topic deleted since installs it (the compaction
  runs with topic churn found it never did);
- a committed DELETE_TOPIC naming no incarnation (its name's create and delete folded into the
  snapshot) deletes nothing, so a re-create applied before its commit stays (it deleted by
  name once).

A soak runs more: `RAFT_SOAK_STEPS=1 REPLICA_OBJECTS_SOAK_ROUNDS=200000 pytest
tests/unit/broker/replication/test_replica_objects_property.py -k soak -s --timeout=0`
(rounds in all, over seeds from REPLICA_OBJECTS_SOAK_SEED; deselected unless RAFT_SOAK_STEPS
is set, tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import replace

import pytest

from common.kaska.errors import UnknownServerError, UnknownTopicOrPartitionError
from services.broker.handlers import replica_fetch
from services.broker.replication.journal import JournalEntry, TopicId
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    ReplicaFetchRequest,
)
from services.broker.storage.log import Log
from tests.unit.broker.replication.raft_sim import SafetyViolation
from tests.unit.broker.replication.replica_objects_sim import (
    CALM,
    HOSTILE,
    PAUSES,
    Broker,
    Cluster,
    Faults,
    HandlerFailure,
    SpinFailure,
    Stats,
    incarnation_of_value,
    read_slices,
)
from tests.unit.broker.storage.batches import records

CONVERGE_ROUNDS_MAX = 400  # 20 simulated seconds
IDLE_ROUNDS = 60  # 3 simulated seconds
WRITE_ROUNDS_MAX = 200
PAUSED_ROUNDS = 10_000  # paused until thawed by hand
OLD_BATCHES = 3


# -- directed: a follower paused across delete and re-create ----------------------------------


def settle(cluster: Cluster) -> Broker:
    """Rounds until every write is answered and every replica equals the leader."""
    for _ in range(WRITE_ROUNDS_MAX):
        if not cluster.pending:
            break
        cluster.round()
    assert not cluster.pending, f"writes unanswered:\n{cluster.describe()}"
    cluster.converge(CONVERGE_ROUNDS_MAX)
    return cluster.converged()


def write(cluster: Cluster, leader: Broker, step) -> None:
    """One write at the leader, answered (acknowledged) before the next."""
    acks = len(cluster.acked_batches) + len(cluster.acked_creates) + len(cluster.acked_deletes)
    assert step(leader), f"the leader refused the write:\n{cluster.describe()}"
    for _ in range(WRITE_ROUNDS_MAX):
        if not cluster.pending:
            break
        cluster.round()
    after = len(cluster.acked_batches) + len(cluster.acked_creates) + len(cluster.acked_deletes)
    assert after == acks + 1, f"the write was not acknowledged:\n{cluster.describe()}"


def paused_across_recreate(cluster: Cluster, new_batches: int, new_pad_bytes: int
                           ) -> tuple[Broker, Broker, TopicId, TopicId]:
    """Topic d with one partition, every broker caught up; then one follower is paused while
    OLD_BATCHES single-record batches go to d, d is deleted and created again and
    `new_batches` batches go to the new d. Returns (leader, follower, old id, new id)."""
    cluster.workload = False
    cluster.faults = CALM
    leader = settle(cluster)
    write(cluster, leader, lambda at: cluster.create(at, "d", 1))
    leader = settle(cluster)
    follower = next(b for b in cluster.brokers.values() if b is not leader)
    cluster.pause(follower.node_id, PAUSED_ROUNDS)
    old_id = leader.node.journal.incarnation("d")
    for _ in range(OLD_BATCHES):
        write(cluster, leader, lambda at: cluster.produce(at, "d", 0, 1))
    write(cluster, leader, lambda at: cluster.delete(at, "d"))
    write(cluster, leader, lambda at: cluster.create(at, "d", 1))
    new_id = leader.node.journal.incarnation("d")
    cluster.pad_bytes = new_pad_bytes
    for _ in range(new_batches):
        write(cluster, leader, lambda at: cluster.produce(at, "d", 0, 1))
    return leader, follower, old_id, new_id


def old_batch_entries(leader: Broker, old_id: TopicId) -> list[JournalEntry]:
    return [entry for entry in leader.node.journal.entries()
            if entry.kind is EntryKind.BATCH and entry.topic_id == old_id]


def values_of(broker: Broker, topic: str) -> list[bytes]:
    return [value for _, value in records(broker.log.partition(topic, 0).read_bytes(0, 1 << 30))]


# (batches in the new incarnation, their extra record bytes): its log ends below every old
# batch's offset; across them (0 and 1 below the end, 2 at it); above them with batches of the
# old ones' size; above them with bigger batches.
RECREATE_CASES = {"new-ends-below-old-offsets": (0, 0), "new-ends-across-old-offsets": (2, 0),
                  "new-above-same-batch-size": (5, 0), "new-above-other-batch-size": (5, 7)}


@pytest.mark.parametrize("case", sorted(RECREATE_CASES))
def test_a_follower_paused_across_delete_and_recreate_converges(tmp_path, case):
    new_batches, pad_bytes = RECREATE_CASES[case]
    cluster = Cluster(tmp_path, size=3, seed=7, faults=CALM, journal_entries_max=10_000)
    try:
        leader, follower, old_id, new_id = paused_across_recreate(cluster, new_batches,
                                                                  pad_bytes)
        # The scenario: the follower lacks every old batch, whose entries the leader still
        # serves (no snapshot), and the name on the leader's disk is the new incarnation.
        old = old_batch_entries(leader, old_id)
        assert len(old) == OLD_BATCHES and old_id != new_id
        assert follower.node.journal.end <= old[0].index
        assert leader.node.journal.start <= follower.node.journal.end
        new_end = leader.log.partition("d", 0).log_end_offset
        assert new_end == new_batches
        new = [entry for entry in leader.node.journal.entries()
               if entry.kind is EntryKind.BATCH and entry.topic_id == new_id]
        assert len(new) == new_batches
        assert len({entry.batch_bytes for entry in old}) == 1
        assert all((entry.batch_bytes == old[0].batch_bytes) == (not pad_bytes)
                   for entry in new)
        cluster.thaw(follower.node_id)
        cluster.converge(CONVERGE_ROUNDS_MAX)
        history = cluster.check_history()
        cluster.check_idle(IDLE_ROUNDS)
        for broker in cluster.brokers.values():
            held = values_of(broker, "d")
            assert len(held) == new_batches
            assert all(incarnation_of_value(value)[1] == new_id for value in held), held
            assert broker.node.journal.incarnation("d") == new_id
        assert history["acknowledged_records"] == new_batches
        assert follower.behind_empty == 0
    finally:
        cluster.close()


# -- the handler before it checked an entry's incarnation: the same scenarios must fail -------


def incarnation_blind_answer(node, group_log: Log, request, stamp=None, session=None):
    """replica_fetch_answer as it was: a BATCH entry's bytes read by topic name, whatever
    incarnation now holds the name."""
    response, entries = node.answer_fetch(request, stamp, session)
    headers, slices = [], []
    for entry in entries:
        if entry.kind is EntryKind.BATCH and not _visible_by_name(group_log, entry):
            break
        found = _slices_by_name(group_log, entry) if entry.kind is EntryKind.BATCH else None
        if found is not None:
            slices.extend(found)
        kind = entry.kind if found is not None or entry.kind is not EntryKind.BATCH \
            else EntryKind.SKIPPED
        headers.append(EntryHeader(entry.index, entry.epoch, kind, entry.topic,
                                   entry.partition, entry.base_offset, entry.record_count,
                                   entry.partitions,
                                   entry.batch_bytes if found is not None else 0))
    return replace(response, entries=tuple(headers)), slices


def _visible_by_name(group_log: Log, entry: JournalEntry) -> bool:
    try:
        return group_log.partition(entry.topic, entry.partition).log_end_offset \
            >= entry.end_offset
    except UnknownTopicOrPartitionError:
        return True


def _slices_by_name(group_log: Log, entry: JournalEntry):
    try:
        partition = group_log.partition(entry.topic, entry.partition)
    except UnknownTopicOrPartitionError:
        return None
    slices = partition.read(entry.base_offset, entry.batch_bytes, upto_offset=entry.end_offset)
    if sum(piece.nbytes for piece in slices) != entry.batch_bytes:
        raise UnknownServerError(f"journal entry {entry.index}: the log has other bytes")
    return slices


BLIND_FAILURES = {"new-ends-below-old-offsets": SpinFailure,
                  "new-ends-across-old-offsets": SafetyViolation,  # served another's bytes
                  "new-above-same-batch-size": SafetyViolation,
                  "new-above-other-batch-size": HandlerFailure}


@pytest.mark.parametrize("case", sorted(RECREATE_CASES))
def test_an_incarnation_blind_handler_fails_the_directed_scenarios(tmp_path, monkeypatch,
                                                                     case):
    """The checks can fail: with the handler reading by name, each case is caught."""
    new_batches, pad_bytes = RECREATE_CASES[case]
    cluster = Cluster(tmp_path, size=3, seed=7, faults=CALM, journal_entries_max=10_000)
    try:
        leader, follower, old_id, _ = paused_across_recreate(cluster, new_batches, pad_bytes)
        assert follower.node.journal.end <= old_batch_entries(leader, old_id)[0].index
        monkeypatch.setattr(replica_fetch, "replica_fetch_answer", incarnation_blind_answer)
        cluster.thaw(follower.node_id)
        with pytest.raises(BLIND_FAILURES[case]) as caught:
            cluster.converge(CONVERGE_ROUNDS_MAX)
        assert str(follower.node_id) in str(caught.value).split("\n")[0] \
            or "served entry" in str(caught.value)
    finally:
        cluster.close()


def test_served_bytes_are_read_through_the_handler_and_its_files(tmp_path):
    """The harness's answers are the handler's: the bytes a follower applies are the slices
    of the leader's partition files (a batch read back from them equals the one produced)."""
    cluster = Cluster(tmp_path, size=3, seed=3, faults=CALM, journal_entries_max=10_000)
    try:
        leader, follower, _, new_id = paused_across_recreate(cluster, 2, 0)
        entry = next(e for e in leader.node.journal.entries()
                     if e.kind is EntryKind.BATCH and e.topic_id == new_id)
        request = ReplicaFetchRequest(follower.node_id, leader.node.state.epoch, entry.index,
                                      leader.node.journal.epoch_of(entry.index - 1), 1 << 20, 0)
        response, slices = replica_fetch.replica_fetch_answer(leader.node, leader.log, request)
        assert response.entries[0].index == entry.index and response.entries[0].data_bytes
        served = [value for _, value in records(read_slices(slices)[:entry.batch_bytes])]
        assert tuple(served) == cluster.written[(entry.index, entry.epoch)]
    finally:
        cluster.close()


# -- directed: a snapshot naming a topic deleted since ---------------------------------------


def test_a_follower_installs_a_snapshot_naming_a_topic_deleted_since(tmp_path, no_fsync):
    """SNAPSHOT_FETCH answers GONE for a topic deleted since the snapshot was made: the
    install goes on without its bytes (the delete follows), never asks for the same snapshot
    again and again (it did: the follower never caught up until the leader compacted past the
    delete; a SpinFailure here)."""
    cluster = Cluster(tmp_path, size=3, seed=5, faults=CALM, journal_entries_max=8)
    try:
        cluster.workload = False
        leader = settle(cluster)
        follower = next(b for b in cluster.brokers.values() if b is not leader)
        cluster.pause(follower.node_id, PAUSED_ROUNDS)
        write(cluster, leader, lambda at: cluster.create(at, "x", 1))
        write(cluster, leader, lambda at: cluster.produce(at, "x", 0, 1))
        write(cluster, leader, lambda at: cluster.create(at, "y", 1))
        for _ in range(12):  # the leader compacts past the paused follower, x in its snapshot
            write(cluster, leader, lambda at: cluster.produce(at, "y", 0, 1))
        write(cluster, leader, lambda at: cluster.delete(at, "x"))
        snapshot = leader.node.journal.snapshot
        # The scenario: the follower is behind the snapshot, which names x and its bytes, and
        # x is deleted (committed) after it.
        assert follower.node.journal.end < snapshot.end <= leader.node.journal.end
        assert "x" in {topic.name for topic in snapshot.topics}
        assert "x" not in leader.log.topics() and leader.node.state.commit > snapshot.end
        assert follower.log.partition("x", 0).log_end_offset == 0 \
            if "x" in follower.log.topics() else True
        cluster.thaw(follower.node_id)
        cluster.converge(CONVERGE_ROUNDS_MAX)
        assert follower.node.counters.snapshots_installed >= 1
        cluster.check_history()
        assert "x" not in follower.log.topics()
    finally:
        cluster.close()


# -- directed: a DELETE_TOPIC entry that names no incarnation ---------------------------------


def test_a_delete_naming_no_incarnation_leaves_a_later_create(tmp_path, no_fsync):
    """A leader journals a DELETE_TOPIC for a name whose last incarnation is deleted and folded
    into the snapshot (ReplicaManager.journal_delete checks no incarnation: a data group's
    close, or a retried delete decided on a disk whose delete was not applied yet), then a
    create of the name: the create is applied on append, the delete on its commit."""
    cluster = Cluster(tmp_path, size=3, seed=11, faults=CALM, journal_entries_max=8)
    try:
        cluster.workload = False
        leader = settle(cluster)
        write(cluster, leader, lambda at: cluster.create(at, "d", 1))
        write(cluster, leader, lambda at: cluster.create(at, "y", 1))
        write(cluster, leader, lambda at: cluster.delete(at, "d"))
        for _ in range(12):  # every broker compacts past the create and the delete of d
            write(cluster, leader, lambda at: cluster.produce(at, "y", 0, 1))
        leader = settle(cluster)
        assert all(broker.node.journal.incarnation("d") is None
                   for broker in cluster.brokers.values())
        delete = leader.manager.journal_delete("d")
        assert delete.topic_id is None
        assert cluster.create(leader, "d", 1)
        for _ in range(WRITE_ROUNDS_MAX):
            if not cluster.pending:
                break
            cluster.round()
        leader.manager.forget_delete("d")
        assert [topic_id for name, topic_id in cluster.acked_creates if name == "d"][-1] \
            == leader.node.journal.incarnation("d") and cluster.committed[delete.index]
        cluster.converge(CONVERGE_ROUNDS_MAX)
        cluster.check_history()
    finally:
        cluster.close()


# -- properties ------------------------------------------------------------------------------


@pytest.fixture
def no_fsync(monkeypatch):
    """The data directories' fsyncs cost most of a run here and matter only for a power cut of
    the machine, which these clusters do not play: a restart closes the Log and the node and
    reopens them, and the page cache keeps what was written."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)

ROUNDS = 800  # 40 simulated seconds of faults per run


def play(tmp_path, size: int, seed: int, faults: Faults, journal_entries_max: int,
         rounds: int = ROUNDS) -> Stats:
    """Run a cluster through `rounds` of faults and churn, heal it, and hold it to every
    check; the failure names the seed and ends with the schedule's last events."""
    cluster = Cluster(tmp_path / f"{size}-{seed}", size=size, seed=seed, faults=faults,
                      journal_entries_max=journal_entries_max)
    try:
        cluster.run(rounds)
        cluster.heal()
        cluster.converge(CONVERGE_ROUNDS_MAX)
        cluster.check_history()
        cluster.check_idle(IDLE_ROUNDS)
        return cluster.settle_stats()
    except AssertionError as exc:  # the same kind of failure, naming the run
        raise type(exc)(f"{size} brokers, seed {seed}, journal_entries_max "
                        f"{journal_entries_max}: {exc}") from exc
    finally:
        cluster.close()


def summary(title: str, total: Stats, runs: int, seconds: float) -> str:
    fields = ", ".join(f"{name} {getattr(total, name)}" for name in (
        "rounds", "elections", "acks", "creates", "deletes", "recreates", "pauses",
        "paused_across_recreates", "partitions", "restarts", "compactions", "installs",
        "snapshot_answers", "skipped_served", "long_polls"))
    return f"{title}: {runs} runs in {seconds:.1f} s: {fields}"


def test_followers_paused_across_churn_converge_and_never_spin(tmp_path, no_fsync):
    """Long pauses across deletes and re-creates of the same names; the leader keeps the
    entries a lagging follower needs (no compaction), so a thawed one catches up from them."""
    total, started = Stats(), time.perf_counter()
    seeds = range(6)
    for seed in seeds:
        total.add(play(tmp_path, 3, seed, PAUSES, journal_entries_max=10_000))
    print(summary("3 brokers, paused followers", total, len(seeds),
                  time.perf_counter() - started))
    assert total.paused_across_recreates >= 10 and total.recreates >= 100
    assert total.acks >= 500 and total.skipped_served >= 1


def test_hostile_network_restarts_and_churn_converge_and_never_spin(tmp_path, no_fsync):
    total, started = Stats(), time.perf_counter()
    runs = [(3, seed) for seed in range(100, 106)] + [(5, 200), (5, 201)]
    for size, seed in runs:
        total.add(play(tmp_path, size, seed, HOSTILE, journal_entries_max=10_000))
    print(summary("hostile, no compaction", total, len(runs), time.perf_counter() - started))
    assert total.restarts >= 10 and total.partitions >= 10 and total.pauses >= 10
    assert total.paused_across_recreates >= 5 and total.recreates >= 50 and total.acks >= 100


@pytest.mark.parametrize("size, seed, faults", [(3, 0, PAUSES), (5, 200, HOSTILE)],
                         ids=["3-paused", "5-hostile"])
def test_an_incarnation_blind_handler_fails_the_property_runs(tmp_path, no_fsync, monkeypatch,
                                                              size, seed, faults):
    """The campaigns above reach the handler's path: with the handler reading by name, their
    runs are caught (UnknownServerError, another incarnation's bytes served, or a spin)."""
    monkeypatch.setattr(replica_fetch, "replica_fetch_answer", incarnation_blind_answer)
    with pytest.raises((HandlerFailure, SafetyViolation, SpinFailure)):
        play(tmp_path, size, seed, faults, journal_entries_max=10_000)


# Topics created and written, never deleted: the snapshots a follower installs name live
# topics only (the next test adds deletes).
COMPACTING_NO_DELETES = dataclasses.replace(HOSTILE, delete=0.0)


def test_compaction_and_snapshot_installs_converge(tmp_path, no_fsync):
    """Small journals: leaders compact often, and a follower further behind than half the
    bound (paused, cut off, restarted) installs the leader's snapshot."""
    total, started = Stats(), time.perf_counter()
    runs = [(3, seed) for seed in range(300, 304)] + [(5, 400), (5, 401)]
    for size, seed in runs:
        total.add(play(tmp_path, size, seed, COMPACTING_NO_DELETES, journal_entries_max=16))
    print(summary("hostile, compacting", total, len(runs), time.perf_counter() - started))
    assert total.compactions >= 20 and total.installs >= 5 and total.restarts >= 5


def test_compaction_and_snapshot_installs_under_topic_churn_converge(tmp_path, no_fsync):
    """The same with topics deleted and re-created: a snapshot may name a topic deleted since
    it was made (3 brokers, seed 300 found the install that never finished)."""
    total, started = Stats(), time.perf_counter()
    runs = [(3, seed) for seed in range(300, 306)] + [(5, 400)]
    for size, seed in runs:
        total.add(play(tmp_path, size, seed, HOSTILE, journal_entries_max=16))
    print(summary("hostile, compacting, churn", total, len(runs),
                  time.perf_counter() - started))
    assert total.compactions >= 10 and total.installs >= 3 and total.recreates >= 10


# -- soak ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.soak
def test_soak(tmp_path, no_fsync):
    budget = int(os.environ.get("REPLICA_OBJECTS_SOAK_ROUNDS", "50000"))
    seed = int(os.environ.get("REPLICA_OBJECTS_SOAK_SEED", "1000"))
    total, started, runs = Stats(), time.perf_counter(), 0
    profiles = [(3, PAUSES, 10_000), (3, HOSTILE, 10_000), (3, HOSTILE, 16), (5, HOSTILE, 16),
                (5, PAUSES, 24)]
    while total.rounds < budget:
        size, faults, entries_max = profiles[runs % len(profiles)]
        faults = dataclasses.replace(faults)
        total.add(play(tmp_path, size, seed + runs, faults, entries_max, rounds=1000))
        runs += 1
    print(summary("soak", total, runs, time.perf_counter() - started))
