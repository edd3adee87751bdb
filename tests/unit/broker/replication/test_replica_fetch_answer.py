"""The leader's REPLICA_FETCH answer (`replica_fetch_answer`, the handler's answer code) over
the real ReplicationNode, ReplicaManager, Journal and Log, within one incarnation of a topic:
batches go as data, byte for byte; a batch whose bytes retention removed goes as SKIPPED, while
the first batch still held -- the one at the held start -- goes as data; a batch below a
DeleteRecords start but still on disk goes as data too (a follower holds the same bytes).
Deletes and re-creates, and batches not yet published: test_replica_fetch_incarnations.py."""

from __future__ import annotations

import pytest

from services.broker.handlers.replica_fetch import replica_fetch_answer
from services.broker.replication.wire.replica_fetch import EntryKind, ReplicaFetchRequest
from services.broker.storage.log import Log
from tests.unit.broker.replication.test_replica_fetch_incarnations import LAGGING, produce, wire
from tests.unit.broker.replication.test_replication_safety import Clock, leader_with_topic
from tests.unit.broker.storage.batches import SMALL, records

# Four batches of ~960 bytes fill a SMALL (4096-byte) segment: offsets 0-3 in the first
# segment, 4-5 in the active one.
VALUES = [bytes([ord("a") + i]) * 900 for i in range(6)]


@pytest.fixture
def leader(tmp_path):
    with Log(tmp_path / "leader", SMALL) as log:
        node, manager = leader_with_topic(log, Clock())
        try:
            produce(manager, "t", *VALUES)
            yield node, log
        finally:
            node.stop()


def _answer_from_the_start(node, log):
    request = ReplicaFetchRequest(LAGGING, node.state.epoch, 0, 0, 1 << 20, 0)
    response, slices = replica_fetch_answer(node, log, request)
    batches = [(header.kind, header.base_offset, header.data_bytes > 0)
               for header in response.entries if header.topic == "t"
               and header.kind in (EntryKind.BATCH, EntryKind.SKIPPED)]
    return response, slices, batches


def test_every_batch_is_answered_as_data_byte_for_byte(leader):
    node, log = leader
    partition = log.partition("t", 0)
    assert partition.held_start_offset == 0 and partition.log_end_offset == len(VALUES)
    response, slices, batches = _answer_from_the_start(node, log)
    assert batches == [(EntryKind.BATCH, offset, True) for offset in range(len(VALUES))]
    assert response.entries[-1].index == node.journal.end - 1
    data = wire_data(response, slices)
    assert records(data) == list(enumerate(VALUES))


def test_the_batch_at_the_held_start_is_data_and_those_below_it_are_skipped(leader):
    node, log = leader
    partition = log.partition("t", 0)
    assert partition.delete_segments_below(4) == 1  # as retention deletes the first segment
    assert partition.held_start_offset == 4 == partition.log_start_offset
    response, slices, batches = _answer_from_the_start(node, log)
    assert batches == [(EntryKind.SKIPPED, offset, False) for offset in range(4)] + \
        [(EntryKind.BATCH, 4, True), (EntryKind.BATCH, 5, True)]
    data = wire_data(response, slices)
    assert records(data) == [(4, VALUES[4]), (5, VALUES[5])]


def test_a_batch_below_a_delete_records_start_but_still_held_is_data(leader):
    node, log = leader
    partition = log.partition("t", 0)
    partition.delete_records(5)  # the first segment (0-3) goes; batch 4 stays on disk
    assert (partition.held_start_offset, partition.log_start_offset) == (4, 5)
    response, slices, batches = _answer_from_the_start(node, log)
    assert batches == [(EntryKind.SKIPPED, offset, False) for offset in range(4)] + \
        [(EntryKind.BATCH, 4, True), (EntryKind.BATCH, 5, True)]
    assert records(wire_data(response, slices)) == [(4, VALUES[4]), (5, VALUES[5])]


def wire_data(response, slices) -> bytes:
    """The batch bytes a follower reads after the prefix (decoded as it decodes them)."""
    decoded = wire(response, slices)
    assert decoded.entries == response.entries
    return bytes(decoded.data)
