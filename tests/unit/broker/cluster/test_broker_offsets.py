"""Committed offsets: stored in `__offsets`, latest wins, rebuilt identically on reopen."""

import pytest

from common.kaska.errors import InvalidRequestError
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import (
    CommittedOffsets,
    decode_commit,
    encode_commit,
    validate_group,
)
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

CONFIG = LogConfig(segment_bytes_max=8192, batch_bytes_max=4096)


def test_commit_record_round_trip():
    assert decode_commit(encode_commit("g", "t", 3, 99)) == (("g", "t", 3), 99)


def test_latest_commit_wins_and_survives_reopen(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = CommittedOffsets(storage)
        assert offsets.load() == 0 and OFFSETS_TOPIC in storage.topics()
        offsets.commit("g", "t", 0, 5)
        offsets.commit("g", "t", 0, 9)
        offsets.commit("g", "t", 1, 2)
        offsets.commit("other", "t", 0, 1)
        assert offsets.committed("g", "t", 0) == 9
    with Log(tmp_path, CONFIG) as storage:
        offsets = CommittedOffsets(storage)
        assert offsets.load() == 4
        assert [offsets.committed("g", "t", 0), offsets.committed("g", "t", 1),
                offsets.committed("other", "t", 0), offsets.committed("g", "u", 0)] == \
            [9, 2, 1, None]


def test_rebuild_reads_across_many_segments(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = CommittedOffsets(storage)
        offsets.load()
        for i in range(300):  # ~100 bytes each: spans several 8 KiB segments
            offsets.commit("g", f"topic-{i % 7}", i % 3, i)
        assert storage.partition(OFFSETS_TOPIC, 0).segment_count > 2
    with Log(tmp_path, CONFIG) as storage:
        offsets = CommittedOffsets(storage)
        assert offsets.load() == 300
        assert offsets.committed("g", "topic-6", 2) == 293  # last i with i%7==6, i%3==2


def test_forgotten_topic_stays_forgotten_after_reopen(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        offsets = CommittedOffsets(storage)
        offsets.load()
        offsets.commit("g", "gone", 0, 4)
        offsets.commit("g", "kept", 0, 6)
        offsets.forget_topic("gone")
        assert offsets.committed("g", "gone", 0) is None
    with Log(tmp_path, CONFIG) as storage:
        offsets = CommittedOffsets(storage)
        offsets.load()
        assert offsets.committed("g", "gone", 0) is None
        assert offsets.committed("g", "kept", 0) == 6


@pytest.mark.parametrize("group", ["", "g" * 256])
def test_group_names_are_bounded(group):
    with pytest.raises(InvalidRequestError):
        validate_group(group)
