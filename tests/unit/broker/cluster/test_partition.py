"""The Partition a request finds once (cluster/partition.py, partition_table.py): appends,
fetches and the high watermark through a real PartitionLog and a real replication group (broker
1 of three leads it; the network is played by hand, as in test_replication_safety.py), and the
answers of a broker that does not lead it or has no such partition."""

from __future__ import annotations

import pytest

from common.kaska.errors import (
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.produce import ACKS_ALL, ACKS_LEADER
from services.broker.cluster.partition_table import PartitionTable
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.cluster.replication_groups import ReplicationGroup, ReplicationGroups
from services.broker.metrics import BrokerCounters
from services.broker.replication.committed_topics import CommittedTopics
from services.broker.storage.log import Log
from tests.unit.broker.cluster.test_topic_admin_delete import commit_both
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    cluster_node,
    follower_keeping_up,
    leader_with_topic,
)
from tests.unit.broker.replication.test_topic_mirror_nodes import DATA_GROUP, elect
from tests.unit.broker.replication.test_topic_mirror_nodes import (
    brokers as brokers,  # noqa: F401 (fixture)
)
from tests.unit.broker.storage.batches import SMALL, batch, new_producer_id, records


def one_group(log: Log, manager: ReplicaManager) -> PartitionTable:
    node = manager.node
    return PartitionTable(ReplicationGroups([
        ReplicationGroup(0, log, node, CommittedTopics(node.journal), manager)]))


@pytest.fixture
def leader(tmp_path):
    """Broker 1 leads epoch 1 of topic t (one partition, empty), with its lease."""
    with Log(tmp_path / "data", SMALL) as log:
        node, manager = leader_with_topic(log, Clock())
        try:
            yield node, one_group(log, manager)
        finally:
            node.stop()


def test_an_acknowledged_append_is_below_the_high_watermark_and_fetched(leader):
    node, partitions = leader
    partition = partitions.get("t", 0)
    assert partition.high_watermark() == 0
    with follower_keeping_up(node):
        result = partition.append(batch(b"one", b"two"), ACKS_ALL)
    assert (result.base_offset, result.record_count) == (0, 2)
    assert partition.high_watermark() == 2 == partition.log.log_end_offset
    fetched = partition.fetch(0, 1 << 20)
    assert (fetched.high_watermark, fetched.log_start_offset) == (2, 0)
    assert not fetched.caught_up and not fetched.above_high_watermark
    assert records(fetched.copy()) == [(0, b"one"), (1, b"two")]
    bounds_only = partition.fetch(0, 0)  # no room asked for: not even the first batch
    assert (bounds_only.high_watermark, bounds_only.slices) == (2, [])
    assert records(partition.fetch(0, 1).copy()) == [(0, b"one"), (1, b"two")], "at least one"
    at_end = partition.fetch(2, 1 << 20)
    assert at_end.caught_up and at_end.slices == [] and not at_end.above_high_watermark
    with pytest.raises(OffsetOutOfRangeError):
        partition.fetch(3, 1 << 20)


def test_a_batch_not_yet_committed_is_in_the_log_but_not_fetched(leader):
    _node, partitions = leader
    partition = partitions.get("t", 0)

    def fill(region: memoryview) -> None:
        region[:] = data

    data = batch(b"pending")
    result, await_acks = partition.append_deferred(len(data), fill, ACKS_LEADER)
    await_acks()  # acks=1: the leader has it, a majority need not
    assert result.base_offset == 0 and partition.log.log_end_offset == 1
    assert partition.high_watermark() == 0
    assert partition.fetch(0, 1 << 20).caught_up
    above = partition.fetch(1, 1 << 20)
    assert above.above_high_watermark and above.slices == []
    assert partition.fetch(0, 0).slices == []  # no room asked for: the bounds only


def test_a_leader_whose_lease_lapsed_is_refused_for_reads_not_for_writes(leader):
    # Reads (fetch, list offsets) ask for the lease by default; a write waits for it itself.
    node, partitions = leader
    partition = partitions.get("t", 0)
    assert partition.require_leader().is_leader
    node._clock.now_s += 60.0  # a pause far beyond the lease; no tick has run since
    with pytest.raises(NotLeaderError, match="lease expired"):
        partition.require_leader()
    assert partition.require_leader(lease=False).is_leader


def _partition_counted_in(node, counters: BrokerCounters):
    """Partition t/0 of a replica manager that counts into `counters`."""
    manager = ReplicaManager(node, ("127.0.0.1", 9092), node._log, ack_timeout_s=WAIT_S,
                             counters=counters)
    return one_group(node._log, manager).get("t", 0)


def test_a_read_at_a_leader_whose_lease_lapsed_is_refused_without_a_lease_wait(leader):
    # Only writes wait for the lease (`lease_wait_s`); a read's refusal is counted as a lease
    # refusal, never as a lease wait (`lease_waits` counts held writes).
    node, _partitions = leader
    counters = BrokerCounters()
    partition = _partition_counted_in(node, counters)
    node._clock.now_s += 60.0
    with pytest.raises(NotLeaderError, match="lease expired"):
        partition.require_leader()
    assert counters.lease_refusals == 1
    assert node.counters.lease_waits == 0


def test_client_bytes_are_counted_once_per_batch_and_never_for_a_dropped_retry(leader):
    node, _partitions = leader
    counters = BrokerCounters()
    partition = _partition_counted_in(node, counters)
    data = batch(b"once", b"twice", producer_id=new_producer_id(), sequence=0)
    with follower_keeping_up(node):
        assert not partition.append(data, ACKS_ALL).duplicate
        counted = counters.snapshot()
        assert (counted.bytes_in, counted.records_in) == (len(data), 2)
        assert partition.append(data, ACKS_ALL).duplicate
    assert counters.snapshot() == counted


def test_deleting_records_up_to_offset_0_answers_the_start_at_once(leader):
    _node, partitions = leader
    partition = partitions.get("t", 0)
    assert partition.delete_records_deferred(0)() == 0
    with pytest.raises(OffsetOutOfRangeError):
        partition.delete_records_deferred(-2)


def test_an_acks_all_retry_of_an_appended_batch_is_answered_with_its_offsets(leader):
    # An idempotent producer's retry appends nothing (so journals nothing): its answer waits
    # for the original batch's entry, found in the journal.
    node, partitions = leader
    partition = partitions.get("t", 0)
    data = batch(b"once", producer_id=new_producer_id(), sequence=0)
    with follower_keeping_up(node):
        first = partition.append(data, ACKS_ALL)
        retry = partition.append(data, ACKS_ALL)
    assert (retry.base_offset, retry.record_count) == (first.base_offset, 1) == (0, 1)
    assert partition.log.log_end_offset == 1


def test_an_acks_all_append_no_majority_confirms_is_not_enough_replicas(leader):
    node, _partitions = leader
    impatient = ReplicaManager(node, ("127.0.0.1", 9092), node._log, ack_timeout_s=0.2)
    data = batch(b"alone")
    _result, await_acks = one_group(node._log, impatient).get("t", 0).append_deferred(
        len(data), lambda region: region.__setitem__(slice(None), data), ACKS_ALL)
    with pytest.raises(NotEnoughReplicasError):
        await_acks()  # nobody fetches: the wait ends at the ack timeout


def test_a_broker_that_does_not_lead_answers_not_leader(tmp_path):
    with Log(tmp_path / "data", SMALL) as log:
        node = cluster_node(2, log, Clock())  # a follower that never heard of a leader
        log.create_topic("t", 1)  # as if replicated (the node reconciled its log on start)
        manager = ReplicaManager(node, ("127.0.0.1", 9093), log, ack_timeout_s=WAIT_S)
        try:
            partition = one_group(log, manager).get("t", 0)
            with pytest.raises(NotLeaderError):
                partition.require_leader()
            with pytest.raises(NotLeaderError):
                partition.append(batch(b"refused"))
            assert partition.log.log_end_offset == 0
        finally:
            node.stop()


def test_an_unknown_topic_or_partition_is_refused_at_the_lookup(leader):
    _node, partitions = leader
    for topic, number in (("nope", 0), ("t", 1)):
        with pytest.raises(UnknownTopicOrPartitionError):
            partitions.get(topic, number)


def test_a_data_group_partition_is_found_only_once_its_group_opened_the_incarnation(brokers):
    clock, one, _two = brokers
    elect(one.metadata, clock, voter=2)
    elect(one.data, clock, voter=2)
    groups = ReplicationGroups([
        ReplicationGroup(number, log, node, topics, manager)
        for number, (log, node, topics, manager) in enumerate(zip(
            one.logs, one.nodes, one.topics, one.managers, strict=True))])
    assert groups.of("t", 0).number == DATA_GROUP
    partitions = PartitionTable(groups)
    one.managers[0].journal_create("t", 1)
    commit_both(one)
    with pytest.raises(UnknownTopicOrPartitionError):
        partitions.get("t", 0)  # the metadata group has it, the data group not yet
    one.mirror.round_once()
    commit_both(one)
    assert partitions.get("t", 0).log is one.logs[DATA_GROUP].partition("t", 0)
