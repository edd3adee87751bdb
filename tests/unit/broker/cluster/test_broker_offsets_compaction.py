"""`__offsets` snapshots and compaction: the table after compaction and reload equals the
table before; followers keep up with `absorb`; retention deletes only what a committed
snapshot supersedes."""

import logging

import pytest

from common.kaska.errors import NotEnoughReplicasError, OffsetOutOfRangeError
from common.kaska.record_batch import encode_batch, iter_batches, iter_records
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import (
    SNAPSHOT_FORMAT_VERSION,
    SNAPSHOT_GROUP,
    SNAPSHOT_TOPIC,
    CommittedOffsets,
    OffsetsSnapshotError,
    decode_commit,
    encode_commit,
    encode_snapshot,
    is_snapshot_marker,
)
from services.broker.cluster.retention import RetentionThread
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

CONFIG = LogConfig(segment_bytes_max=8192, batch_bytes_max=4096)
SMALL_SNAPSHOTS = {"snapshot_commits_min": 20, "roll_bytes_min": 1024}


def open_offsets(storage, **kwargs) -> CommittedOffsets:
    offsets = CommittedOffsets(storage, **{**SMALL_SNAPSHOTS, **kwargs})
    offsets.load()
    return offsets


def offsets_partition(storage):
    return storage.partition(OFFSETS_TOPIC, 0)


def log_batches(storage) -> list[bytes]:
    partition = offsets_partition(storage)
    data = partition.read_bytes(partition.log_start_offset, 10**8)
    return [bytes(view) for _, view in iter_batches(data)]


def commit_many(offsets: CommittedOffsets, count: int, keys: int = 6) -> None:
    """`count` commits over `keys` distinct keys, key k = (group-{k%2}, topic-{k}, 0)."""
    for i in range(count):
        k = i % keys
        offsets.commit(f"group-{k % 2}", f"topic-{k}", 0, i)


def compact(storage, offsets, safe_offset=None) -> int:
    return RetentionThread(storage, interval_ms=60_000, clock_ms=lambda: 0,
                           safe_offset=safe_offset,
                           compactable_below=offsets.compactable_below).run_once()


def test_snapshot_batch_decodes_with_the_ordinary_readers():
    table = {("g", "t", 0): 5, ("h", "u", 2): 9}
    values = [value for _, value in iter_records(encode_snapshot(table))]
    commits = [decode_commit(value) for value in values]
    assert commits[0] == ((SNAPSHOT_GROUP, SNAPSHOT_TOPIC, SNAPSHOT_FORMAT_VERSION), 2)
    assert is_snapshot_marker(commits[0][0])
    assert dict(commits[1:]) == table
    assert not any(is_snapshot_marker(key) for key, _ in commits[1:])


def test_snapshot_once_commits_exceed_the_threshold(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        commit_many(offsets, 20, keys=5)  # threshold max(20, 2 x live keys) not exceeded
        assert offsets.snapshot_offset is None and offsets.compactable_below() == 0
        before = offsets.all_committed()
        commit_many(offsets, 1, keys=5)
        before[("group-0", "topic-0", 0)] = 0
        assert offsets.snapshot_offset == 21  # commit batches at 0..20, then the snapshot
        assert offsets.compactable_below() == 21
        assert offsets.all_committed() == before
        *_, last = log_batches(storage)
        assert dict(decode_commit(v) for _, v in list(iter_records(last))[1:]) == before


def test_threshold_grows_with_the_live_keys(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        for i in range(30):  # 30 live keys: a snapshot after more than 60 commits
            offsets.commit("g", f"t{i}", 0, i)
        for i in range(30):
            offsets.commit("g", f"t{i}", 0, 100 + i)
        assert offsets.snapshot_offset is None
        offsets.commit("g", "t0", 0, 7)
        assert offsets.snapshot_offset == 61


def test_compaction_then_reload_gives_the_same_table(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        commit_many(offsets, 400)
        offsets.forget_topic("topic-5")
        commit_many(offsets, 77)
        partition = offsets_partition(storage)
        assert partition.segment_count > 3
        before = offsets.all_committed()
        assert compact(storage, offsets) > 0
        assert 0 < partition.log_start_offset <= offsets.compactable_below()
        assert partition.log_end_offset > 400  # offsets stay dense: nothing renumbered
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        assert offsets.all_committed() == before
        assert offsets.load() < 477


def test_compaction_keeps_the_segment_holding_the_snapshot(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        commit_many(offsets, 300)
        compact(storage, offsets)
        partition = offsets_partition(storage)
        assert partition.log_start_offset <= offsets.snapshot_offset
        assert compact(storage, offsets) == 0  # nothing more until the next snapshot


def test_compaction_waits_for_the_snapshot_to_be_committed(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        commit_many(offsets, 300)
        snapshot = offsets.compactable_below()
        assert compact(storage, offsets, safe_offset=lambda t, p: snapshot) == 0
        assert offsets_partition(storage).log_start_offset == 0
        assert compact(storage, offsets, safe_offset=lambda t, p: snapshot + 1) > 0


def test_offsets_are_left_alone_without_compactable_below(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        commit_many(offsets, 300)
        assert RetentionThread(storage, interval_ms=60_000).run_once() == 0
        assert offsets_partition(storage).log_start_offset == 0


def test_load_resets_the_table_at_a_snapshot(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        storage.create_topic(OFFSETS_TOPIC, 1)
        partition = offsets_partition(storage)
        partition.append(encode_batch([encode_commit("g", "gone", 0, 5)]))
        partition.append(encode_snapshot({("g", "kept", 0): 1}))
        partition.append(encode_batch([encode_commit("g", "after", 0, 3)]))
        offsets = CommittedOffsets(storage)
        assert offsets.load() == 3
        assert offsets.all_committed() == {("g", "kept", 0): 1, ("g", "after", 0): 3}
        assert offsets.snapshot_offset == 1


@pytest.mark.parametrize("marker", [
    encode_commit(SNAPSHOT_GROUP, SNAPSHOT_TOPIC, SNAPSHOT_FORMAT_VERSION + 1, 0),
    encode_commit(SNAPSHOT_GROUP, SNAPSHOT_TOPIC, SNAPSHOT_FORMAT_VERSION, 2),
])
def test_an_unreadable_snapshot_refuses_to_load(tmp_path, marker):
    with Log(tmp_path, CONFIG) as storage:
        storage.create_topic(OFFSETS_TOPIC, 1)
        offsets_partition(storage).append(encode_batch([marker,
                                                        encode_commit("g", "t", 0, 1)]))
        with pytest.raises(OffsetsSnapshotError):
            CommittedOffsets(storage).load()


def test_absorb_keeps_a_follower_table_and_snapshot_current(tmp_path):
    with Log(tmp_path / "leader", CONFIG) as leader, \
            Log(tmp_path / "follower", CONFIG) as follower:
        offsets = open_offsets(leader)
        replica = open_offsets(follower)
        commit_many(offsets, 300)
        for batch in log_batches(leader):
            offsets_partition(follower).append_replica(batch)
            replica.absorb(batch)
        assert replica.all_committed() == offsets.all_committed()
        assert replica.snapshot_offset == offsets.snapshot_offset is not None
        assert offsets_partition(follower).segment_count > 1  # rolled after snapshots
        assert compact(follower, replica) > 0
        assert open_offsets(follower).all_committed() == offsets.all_committed()


def test_an_append_without_result_finds_the_snapshot_by_reading_back(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        plain = open_offsets(storage, append=lambda b: offsets_partition(storage).append(b)
                             and None)
        commit_many(plain, 21, keys=5)
        assert plain.snapshot_offset == 21


def test_a_snapshot_not_where_expected_is_not_trusted(tmp_path, caplog):
    with Log(tmp_path, CONFIG) as storage:
        def append(batch):
            partition = offsets_partition(storage)
            if is_snapshot_marker(decode_commit(next(iter_records(batch))[1])[0]):
                # Someone else's batch got in first: the snapshot lands one further.
                partition.append(encode_batch([encode_commit("x", "y", 0, -1)]))
            partition.append(batch)

        offsets = open_offsets(storage, append=append)
        with caplog.at_level(logging.WARNING):
            commit_many(offsets, 21, keys=5)
        assert "not found at offset 21" in caplog.text
        assert offsets.snapshot_offset is None and offsets.compactable_below() == 0


def test_a_failed_snapshot_append_does_not_fail_the_commit(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        failing = [True]

        def append(batch):
            if failing[0] and is_snapshot_marker(decode_commit(
                    next(iter_records(batch))[1])[0]):
                raise NotEnoughReplicasError("no majority")
            return offsets_partition(storage).append(batch)

        offsets = open_offsets(storage, append=append)
        commit_many(offsets, 21, keys=5)  # the 21st commit is stored, its snapshot is not
        assert offsets.committed("group-0", "topic-0", 0) == 20
        assert offsets.snapshot_offset is None
        failing[0] = False
        commit_many(offsets, 1, keys=5)  # tried again with the next commit
        assert offsets.snapshot_offset == 22


def test_a_snapshot_over_batch_bytes_max_is_not_written(tmp_path, caplog):
    config = LogConfig(segment_bytes_max=8192, batch_bytes_max=512)
    with Log(tmp_path, config) as storage:
        offsets = open_offsets(storage)
        with caplog.at_level(logging.WARNING):
            for i in range(21):
                offsets.commit("a-rather-long-group-name", f"topic-{i % 10}", 0, i)
        assert "over batch_bytes_max 512" in caplog.text
        assert offsets.snapshot_offset is None


def test_load_reads_again_when_compaction_moves_the_start(tmp_path, monkeypatch):
    with Log(tmp_path, CONFIG) as storage:
        offsets = open_offsets(storage)
        commit_many(offsets, 300)
        expected = offsets.all_committed()
        partition = offsets_partition(storage)
        real_read = type(partition).read_bytes
        raised = []

        def racing_read(self, *args, **kwargs):
            if not raised:
                raised.append(True)
                raise OffsetOutOfRangeError("segment deleted under the reader")
            return real_read(self, *args, **kwargs)

        monkeypatch.setattr(type(partition), "read_bytes", racing_read)
        offsets.load()
        assert raised and offsets.all_committed() == expected


def test_default_threshold_is_a_thousand_commits(tmp_path):
    config = LogConfig(segment_bytes_max=1 << 20, batch_bytes_max=1 << 16)
    with Log(tmp_path, config) as storage:
        offsets = CommittedOffsets(storage)
        offsets.load()
        commit_many(offsets, 1000, keys=50)
        assert offsets.snapshot_offset is None
        commit_many(offsets, 1, keys=50)
        assert offsets.snapshot_offset == 1001
