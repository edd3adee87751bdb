"""The PartitionLog hooks replication uses: on_append, append_replica, restart_at, retention
below a safe offset, roll and delete_segments_below."""

import dataclasses

import pytest

from common.kaska.errors import (
    CorruptBatchError,
    MessageTooLargeError,
    NotLeaderError,
    OffsetOutOfRangeError,
)
from common.kaska.record_batch import iter_batches
from services.broker.storage.errors import ReplicaOffsetMismatchError
from services.broker.storage.log import Log
from services.broker.storage.partition import PartitionLog
from services.broker.storage.segment import LogSegment, log_path

from .batches import SMALL, batch, new_producer_id, records, sized_batch


class SimulatedCrash(Exception):
    """Stands for a SIGKILL at a chosen point: the object is abandoned, the directory reopened."""


@pytest.fixture
def part(tmp_path):
    log = PartitionLog(tmp_path / "p", SMALL)
    yield log
    log.close()


@pytest.fixture
def follower(tmp_path):
    log = PartitionLog(tmp_path / "f", SMALL)
    yield log
    log.close()


def _config(**overrides):
    return dataclasses.replace(SMALL, **overrides)


def offsets(part: PartitionLog) -> list[int]:
    return [offset for offset, _ in records(part.read_bytes(part.log_start_offset, 10**7))]


def stored_batches(part: PartitionLog) -> list[bytes]:
    data = part.read_bytes(part.log_start_offset, 10**7)
    return [bytes(view) for _, view in iter_batches(data)]


def refuse(header, base_offset):
    raise NotLeaderError("deposed")


# -- on_append ------------------------------------------------------------------------------


def test_on_append_sees_the_valid_batch_before_it_is_visible(part):
    part.append(batch(b"a", b"b"))
    seen = []

    def journal(header, base_offset):
        seen.append((header.record_count, header.total_bytes, base_offset,
                     part.log_end_offset, part.read(base_offset, 10**6)))

    data = batch(b"c", b"d", b"e")
    result = part.append(data, leader_epoch=3, on_append=journal)
    assert seen == [(3, len(data), 2, 2, [])]  # LEO not advanced, nothing readable yet
    assert (result.base_offset, part.log_end_offset) == (2, 5)
    [(header, _view)] = list(iter_batches(part.read_bytes(2, 10**6)))
    assert (header.base_offset, header.leader_epoch) == (2, 3)


def test_on_append_also_runs_for_append_from(part):
    data = batch(b"x")
    seen = []

    def fill(region):
        region[:] = data

    part.append_from(len(data), fill, on_append=lambda h, b: seen.append(b))
    assert seen == [0]


def test_on_append_is_not_called_for_a_duplicate(part):
    pid = new_producer_id()
    first = batch(b"a", producer_id=pid, sequence=0)
    calls = []
    part.append(first, on_append=lambda h, b: calls.append(b))
    again = part.append(first, on_append=lambda h, b: calls.append(b))
    assert again.duplicate and calls == [0]


def test_on_append_not_called_for_a_corrupt_batch(part):
    bad = bytearray(batch(b"x" * 50))
    bad[70] ^= 1
    calls = []
    with pytest.raises(CorruptBatchError):
        part.append(bytes(bad), on_append=lambda h, b: calls.append(b))
    assert calls == []


def test_on_append_raising_leaves_nothing_and_the_next_append_gets_the_offset(part, tmp_path):
    part.append(batch(b"before"))
    with pytest.raises(NotLeaderError):
        part.append(batch(b"refused"), on_append=refuse)
    assert part.log_end_offset == 1 and part.read(1, 10**6) == []
    assert part.append(batch(b"after")).base_offset == 1
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert records(reopened.read_bytes(0, 10**6)) == [(0, b"before"), (1, b"after")]
    reopened.close()


def test_on_append_raising_keeps_the_producer_sequence_free(part):
    pid = new_producer_id()
    part.append(batch(b"a", producer_id=pid, sequence=0))
    with pytest.raises(NotLeaderError):
        part.append(batch(b"b", producer_id=pid, sequence=1), on_append=refuse)
    assert part.last_sequence(pid) == 0
    result = part.append(batch(b"b", producer_id=pid, sequence=1))
    assert (result.base_offset, result.duplicate) == (1, False)


def test_on_append_raising_on_a_rolling_batch(part, tmp_path):
    for i in range(8):  # a full segment
        part.append(sized_batch(500, i))
    with pytest.raises(NotLeaderError):
        part.append(sized_batch(500, 8), on_append=refuse)
    assert part.log_end_offset == 8
    assert part.append(sized_batch(500, 8)).base_offset == 8
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert offsets(reopened) == list(range(9))
    reopened.close()


# -- append_replica -------------------------------------------------------------------------


def test_replica_is_byte_identical_and_keeps_offsets_and_epochs(part, follower):
    for epoch, i in zip([1, 1, 2, 2, 5] * 4, range(20), strict=True):
        part.append(sized_batch(300 + i, i), leader_epoch=epoch)
    for data in stored_batches(part):
        follower.append_replica(data)
    assert stored_batches(follower) == stored_batches(part)
    assert follower.log_end_offset == part.log_end_offset == 20
    epochs = [h.leader_epoch for h, _ in iter_batches(follower.read_bytes(0, 10**7))]
    assert epochs == [1, 1, 2, 2, 5] * 4


def test_replica_producer_table_matches_the_leader(part, follower):
    pid = new_producer_id()
    for seq in range(3):
        part.append(batch(b"v", producer_id=pid, sequence=seq))
    for data in stored_batches(part):
        follower.append_replica(data)
    retry = follower.append(batch(b"v", producer_id=pid, sequence=1))
    assert (retry.duplicate, retry.base_offset) == (True, 1)
    assert follower.last_sequence(pid) == part.last_sequence(pid) == 2


def test_replica_skips_the_sequence_check(part, follower):
    """The leader decided (say it had forgotten the producer): the follower stores it too."""
    pid = new_producer_id()
    follower.append(batch(b"v", producer_id=pid, sequence=0))
    part.append(batch(b"other"))
    part.append(batch(b"v", producer_id=pid, sequence=7))  # new to the leader: accepted
    follower.append_replica(stored_batches(part)[1])  # a gap after 0 for the follower's check
    assert follower.log_end_offset == 2 and follower.last_sequence(pid) == 7


def test_replica_offset_mismatch_is_refused_with_both_offsets(part, follower):
    for i in range(3):
        part.append(batch(b"%d" % i))
    first, second, third = stored_batches(part)
    follower.append_replica(first)
    with pytest.raises(ReplicaOffsetMismatchError, match="offset 2, log ends at 1"):
        follower.append_replica(third)
    with pytest.raises(ReplicaOffsetMismatchError, match="offset 0, log ends at 1"):
        follower.append_replica(first)
    assert follower.log_end_offset == 1
    follower.append_replica(second)
    assert follower.log_end_offset == 2


def test_replica_corrupt_or_oversized_batches_are_refused(part, follower):
    part.append(batch(b"x" * 100))
    (good,) = stored_batches(part)
    bad = bytearray(good)
    bad[80] ^= 1
    with pytest.raises(CorruptBatchError):
        follower.append_replica(bytes(bad))
    with pytest.raises(CorruptBatchError):
        follower.append_replica(good + b"\0")  # framing disagrees with the batch length
    with pytest.raises(CorruptBatchError):
        follower.append_replica(good[:40])
    with pytest.raises(MessageTooLargeError):
        follower.append_replica(bytes(SMALL.batch_bytes_max + 1))
    assert follower.log_end_offset == 0 and follower.read(0, 10**6) == []
    follower.append_replica(good)
    assert stored_batches(follower) == [good]


def test_replica_on_append_raising_leaves_nothing(part, follower):
    part.append(batch(b"a"))
    (data,) = stored_batches(part)
    with pytest.raises(NotLeaderError):
        follower.append_replica(data, on_append=refuse)
    assert follower.log_end_offset == 0
    seen = []
    follower.append_replica(data, on_append=lambda h, b: seen.append((b, h.record_count)))
    assert seen == [(0, 1)] and stored_batches(follower) == [data]


def test_replica_survives_reopen(part, follower, tmp_path):
    for i in range(20):
        part.append(sized_batch(500, i), leader_epoch=4)
    for data in stored_batches(part):
        follower.append_replica(data)
    expected = stored_batches(follower)
    follower.close()
    reopened = PartitionLog(tmp_path / "f", SMALL)
    assert stored_batches(reopened) == expected
    reopened.close()


# -- restart_at -----------------------------------------------------------------------------


def test_restart_at_empties_the_log_at_the_offset(part, tmp_path):
    pid = new_producer_id()
    for i in range(20):
        part.append(sized_batch(500, i, producer_id=pid, sequence=i))
    part.restart_at(100)
    assert (part.log_start_offset, part.log_end_offset) == (100, 100)
    assert part.segment_base_offsets() == (100,)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "00000000000000000100.index", "00000000000000000100.log",
        "00000000000000000100.timeindex"]
    assert part.last_sequence(pid) is None
    assert part.append(batch(b"x")).base_offset == 100
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 101)
    reopened.close()


def test_restart_at_the_log_end(part):
    for i in range(3):
        part.append(batch(b"%d" % i))
    part.restart_at(3)
    assert (part.log_start_offset, part.log_end_offset) == (3, 3)
    part.restart_at(3)  # already there: nothing to do
    assert part.segment_base_offsets() == (3,)


def test_restart_at_keeps_an_empty_active_segment_already_there(part):
    for i in range(3):
        part.append(batch(b"%d" % i))
    assert part.roll()
    part.restart_at(3)
    assert part.segment_base_offsets() == (3,)
    assert part.append(batch(b"x")).base_offset == 3


def test_restart_at_below_the_log_end_is_refused(part):
    for i in range(3):
        part.append(batch(b"%d" % i))
    with pytest.raises(ReplicaOffsetMismatchError, match="3"):
        part.restart_at(2)
    assert offsets(part) == [0, 1, 2]


@pytest.mark.parametrize("crash_after_deletes", [0, 1, 2])
def test_restart_at_crash_leaves_the_old_log_or_the_new(tmp_path, monkeypatch,
                                                       crash_after_deletes):
    directory = tmp_path / "p"
    part = PartitionLog(directory, SMALL)
    for i in range(20):  # segments 0, 8, 16
        part.append(sized_batch(500, i))
    real_delete = LogSegment.delete
    deletes = []

    def crashing_delete(segment):
        if len(deletes) == crash_after_deletes:
            raise SimulatedCrash
        deletes.append(segment.base_offset)
        real_delete(segment)

    monkeypatch.setattr(LogSegment, "delete", crashing_delete)
    with pytest.raises(SimulatedCrash):
        part.restart_at(50)
    monkeypatch.undo()
    reopened = PartitionLog(directory, SMALL)
    # Never an empty log at 0: a suffix of the old log (its new segment dropped after the
    # gap), which the follower restarts again.
    assert reopened.log_end_offset == 20
    assert reopened.log_start_offset == 8 * crash_after_deletes
    assert not log_path(directory, 50).exists()
    reopened.restart_at(50)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (50, 50)
    reopened.close()


def test_truncation_below_the_start_crash_after_the_new_segment_gives_the_new_log(
        tmp_path, monkeypatch):
    directory = tmp_path / "p"
    part = PartitionLog(directory, _config(retention_bytes=0))
    for i in range(20):
        part.append(sized_batch(500, i))
    part.apply_retention(now_ms=0)  # starts at 16
    def crashing_delete(segment):
        raise SimulatedCrash

    monkeypatch.setattr(LogSegment, "delete", crashing_delete)
    with pytest.raises(SimulatedCrash):
        part.truncate_to(3)
    monkeypatch.undo()
    reopened = PartitionLog(directory, SMALL)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (3, 3)
    assert not log_path(directory, 16).exists()
    reopened.close()


# -- retention below a safe offset, roll, delete_segments_below -----------------------------


@pytest.mark.parametrize(("upto", "start"), [(None, 32), (0, 0), (15, 8), (16, 16),
                                             (17, 16), (10**9, 32)])
def test_retention_never_deletes_at_or_above_upto_offset(tmp_path, upto, start):
    part = PartitionLog(tmp_path / "p", _config(retention_bytes=0))
    for i in range(40):  # segments 0, 8, 16, 24, 32 (active)
        part.append(sized_batch(500, i))
    part.apply_retention(now_ms=0, upto_offset=upto)
    assert part.log_start_offset == start and part.log_end_offset == 40
    part.close()


def test_log_retention_takes_a_safe_offset_per_partition(tmp_path):
    asked = []

    def safe_offset(topic, partition):
        asked.append((topic, partition))
        return 8 if partition == 0 else 0

    with Log(tmp_path / "data", _config(retention_bytes=0)) as log:
        log.create_topic("a", 2)
        for p in range(2):
            for i in range(20):
                log.partition("a", p).append(sized_batch(500, i))
        assert log.apply_retention(now_ms=0, safe_offset=safe_offset) == 1
        assert sorted(asked) == [("a", 0), ("a", 1)]
        assert [log.partition("a", p).log_start_offset for p in range(2)] == [8, 0]


def test_roll_starts_a_new_segment_at_the_log_end(part):
    assert not part.roll()  # empty: nothing to roll
    part.append(batch(b"a", b"b"))
    before = part.active_segment_bytes
    assert before > 16 and part.roll()
    assert part.segment_base_offsets() == (0, 2) and part.active_segment_bytes == 16
    assert not part.roll()
    assert part.append(batch(b"c")).base_offset == 2
    assert offsets(part) == [0, 1, 2]


def test_delete_segments_below_ignores_retention_settings(part):
    for i in range(20):  # segments 0, 8, 16
        part.append(sized_batch(500, i))
    assert part.delete_segments_below(7) == 0
    assert part.delete_segments_below(9) == 1 and part.log_start_offset == 8
    assert part.delete_segments_below(10**9) == 1  # never the active segment
    assert part.segment_base_offsets() == (16,)
    with pytest.raises(OffsetOutOfRangeError):
        part.read(15, 100)
