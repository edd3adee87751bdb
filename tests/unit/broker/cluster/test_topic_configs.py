"""A topic's own settings (services/broker/cluster/topic_configs.py): parsed and refused by
name, stored in `__offsets` beside the commits, handed to the topic's partitions (and again on
reopen), dropped with the topic; the partitions roll and retain by them."""

import pytest

from common.kaska.record_batch import encode_batch
from services.broker.cluster import topic_configs
from services.broker.cluster.committed_offsets import CommittedOffsets
from services.broker.cluster.topic_configs import InvalidTopicConfigError, TopicConfigs
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

BASE = LogConfig(segment_bytes_max=64 * 1024, batch_bytes_max=8 * 1024)
ROLL_BYTES = 4096
BATCH = encode_batch([b"x" * 900])  # ~1 KB: four fill a 4 KiB segment


def open_broker(path):
    """(Log, CommittedOffsets, TopicConfigs) wired as the broker wires them."""
    storage = Log(path, BASE)
    offsets = CommittedOffsets(storage)
    configs = TopicConfigs(offsets, BASE)
    configs.attach([storage])
    offsets.load()
    return storage, offsets, configs


def test_unsupported_keys_are_refused_all_by_name():
    with pytest.raises(InvalidTopicConfigError) as refused:
        topic_configs.parse(
            [("retention.ms", "5"), ("compression.type", "lz4"), ("cleanup.policy", "compact")],
            BASE,
        )
    assert "cleanup.policy, compression.type" in str(refused.value)
    assert "retention.ms" not in str(refused.value).split("(")[0]


@pytest.mark.parametrize(
    "name, value",
    [
        ("retention.ms", "soon"),
        ("retention.bytes", "-2"),
        ("segment.bytes", "100"),
        ("segment.bytes", str(BASE.segment_bytes_max + 1)),
    ],
)
def test_bad_values_are_refused_naming_the_key(name, value):
    with pytest.raises(InvalidTopicConfigError, match=name):
        topic_configs.parse([(name, value)], BASE)


def test_settings_become_the_partitions_log_config():
    settings = topic_configs.parse(
        [
            ("retention.ms", "-1"),
            ("retention.bytes", "5000"),
            ("segment.bytes", str(ROLL_BYTES)),
            ("retention.ms", None),
        ],
        BASE,
    )
    assert settings == {"retention.bytes": 5000, "segment.bytes": ROLL_BYTES, "retention.ms": -1}
    config = topic_configs.log_config(BASE, settings)
    assert (config.retention_ms, config.retention_bytes, config.segment_roll_bytes) == (
        None,
        5000,
        ROLL_BYTES,
    )
    assert config.segment_bytes_max == BASE.segment_bytes_max  # files keep their size
    assert topic_configs.log_config(BASE, {}) is BASE


def test_settings_reach_the_partitions_survive_reopen_and_go_with_the_topic(tmp_path):
    storage, offsets, configs = open_broker(tmp_path)
    configs.prepare("t", {"segment.bytes": ROLL_BYTES, "retention.bytes": 6000})
    storage.create_topic("t", 2)
    offsets.commit("g", "t", 0, 3)
    assert storage.partition("t", 1).config.segment_roll_bytes == ROLL_BYTES
    assert offsets.all_committed() == {("g", "t", 0): 3}  # settings are no group's commits
    storage.close()

    storage, offsets, configs = open_broker(tmp_path)
    assert configs.settings("t") == {"segment.bytes": ROLL_BYTES, "retention.bytes": 6000}
    assert storage.partition("t", 0).config.retention_bytes == 6000  # given again on load
    offsets.forget_topic("t")  # what a delete does
    assert configs.settings("t") == {}
    assert storage.partition("t", 0).config == BASE
    storage.close()


def test_a_new_topic_of_the_name_keeps_nothing_of_the_old_settings(tmp_path):
    storage, _offsets, configs = open_broker(tmp_path)
    configs.prepare("t", {"retention.ms": 1000, "segment.bytes": ROLL_BYTES})
    configs.prepare("t", {"retention.bytes": 7000})
    assert configs.settings("t") == {"retention.bytes": 7000}
    storage.close()


def test_a_partition_rolls_at_its_topics_segment_size_and_retains_by_its_bytes(tmp_path):
    storage, _offsets, configs = open_broker(tmp_path)
    configs.prepare("t", {"segment.bytes": ROLL_BYTES, "retention.bytes": 3 * ROLL_BYTES})
    storage.create_topic("t", 1)
    storage.create_topic("plain", 1)
    partition, plain = storage.partition("t", 0), storage.partition("plain", 0)
    for _ in range(40):
        partition.append(BATCH)
        plain.append(BATCH)
    assert plain.segment_count == 1  # the broker's 64 KiB segments
    assert partition.segment_count >= 40 // 4  # ~4 batches per 4 KiB segment
    assert partition.log_start_offset == 0

    deleted = partition.apply_retention(now_ms=0)
    assert deleted > 0 and partition.log_start_offset > 0
    assert partition.size_bytes < 3 * ROLL_BYTES + ROLL_BYTES  # at most one segment over the bound
    assert plain.apply_retention(now_ms=0) == 0
    storage.close()


def test_a_partition_takes_settings_that_arrive_after_it_opened(tmp_path):
    """A broker that opened the partitions before reading the settings (its copy of
    `__offsets` lagged) rolls by them from the next append."""
    storage, offsets, configs = open_broker(tmp_path)
    storage.create_topic("t", 1)
    partition = storage.partition("t", 0)
    partition.append(BATCH)
    assert partition.segment_count == 1
    configs.prepare("t", {"segment.bytes": ROLL_BYTES})
    for _ in range(8):
        partition.append(BATCH)
    assert partition.segment_count >= 2
    storage.close()


def test_settings_outlive_the_compaction_of_offsets(tmp_path):
    """`__offsets` keeps only its latest snapshot batch and what follows: the settings must
    be in that snapshot."""
    storage = Log(tmp_path, BASE)
    offsets = CommittedOffsets(storage, snapshot_commits_min=1, roll_bytes_min=0)
    configs = TopicConfigs(offsets, BASE)
    configs.attach([storage])
    offsets.load()
    configs.prepare("t", {"retention.ms": 5000})  # the batch at offset 0
    for i in range(20):  # commits enough to write snapshot batches (each rolls)
        offsets.commit("g", "other", 0, i)
    log_of_offsets = storage.partition("__offsets", 0)
    assert log_of_offsets.delete_segments_below(offsets.compactable_below()) > 0
    assert log_of_offsets.log_start_offset > 0  # the settings' own batch is gone
    storage.close()

    storage = Log(tmp_path, BASE)
    offsets = CommittedOffsets(storage)
    offsets.load()
    configs = TopicConfigs(offsets, BASE)
    configs.attach([storage])  # after the load: reads what the table holds
    assert configs.settings("t") == {"retention.ms": 5000}
    storage.close()
