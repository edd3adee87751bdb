import json
import logging
import os
import shutil
import threading

import pytest

from common.kaska.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from services.broker.storage import reaper as reaper_module
from services.broker.storage.errors import DataDirectoryLockedError, PartitionClosedError
from services.broker.storage.log import Log

from .batches import SMALL, batch, records


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def log(data_dir):
    with Log(data_dir, SMALL) as opened:
        yield opened


def test_create_list_and_use_topics(log, data_dir):
    log.create_topic("flights", 3)
    log.create_topic("__offsets", 1)
    assert log.topics() == {"flights": 3, "__offsets": 1}
    assert log.partition("flights", 2).append(batch(b"x")).base_offset == 0
    meta = json.loads((data_dir / "flights" / "topic.json").read_text())
    assert meta == {"format": 1, "name": "flights", "partitions": 3}
    assert sorted(p.name for p in (data_dir / "flights").iterdir()) == [
        "0", "1", "2", "topic.json"]


def test_topics_and_data_survive_reopen(data_dir):
    with Log(data_dir, SMALL) as log:
        log.create_topic("t", 2)
        log.partition("t", 1).append(batch(b"kept"))
    with Log(data_dir, SMALL) as log:
        assert log.topics() == {"t": 2}
        assert records(log.partition("t", 1).read_bytes(0, 10**6)) == [(0, b"kept")]


def test_unknown_topic_or_partition(log):
    log.create_topic("t", 2)
    for name, partition in [("nope", 0), ("t", 2), ("t", -1)]:
        with pytest.raises(UnknownTopicOrPartitionError):
            log.partition(name, partition)


def test_duplicate_topic_and_bad_partition_counts(log):
    log.create_topic("t", 1)
    with pytest.raises(TopicAlreadyExistsError):
        log.create_topic("t", 1)
    for count in (0, -1, 10**6):
        with pytest.raises(InvalidPartitionsError):
            log.create_topic("u", count)
    assert log.topics() == {"t": 1}


@pytest.mark.parametrize("name", [
    "", ".", "..", "../escape", "a/b", "/abs", "nul\x00byte", "x" * 250, "sp ace", "tab\t",
    "é", "@lock", "@deleted", "..\\win", "a" * 65536,
])
def test_hostile_topic_names_never_touch_the_disk(log, data_dir, name):
    before = sorted(os.listdir(data_dir.parent))
    inside = sorted(os.listdir(data_dir))
    with pytest.raises(InvalidTopicError):
        log.create_topic(name, 1)
    with pytest.raises(InvalidTopicError):
        log.delete_topic(name)
    assert sorted(os.listdir(data_dir.parent)) == before
    assert sorted(os.listdir(data_dir)) == inside


def test_longest_legal_name_works(log):
    name = "a" * 249
    log.create_topic(name, 1)
    assert name in log.topics()


def test_delete_topic_removes_it_everywhere(data_dir):
    with Log(data_dir, SMALL) as log:
        log.create_topic("gone", 2)
        partition = log.partition("gone", 0)
        partition.append(batch(b"x"))
        slices = partition.read(0, 100)
        log.delete_topic("gone")
        assert log.topics() == {}
        assert not (data_dir / "gone").exists()
        assert log.wait_deletes_done(10.0)
        assert list((data_dir / "@deleted").iterdir()) == []
        with pytest.raises(PartitionClosedError):
            partition.append(batch(b"y"))
        # a send in flight still reads the unlinked file
        assert records(os.pread(slices[0].fd, slices[0].nbytes, slices[0].position)) == [
            (0, b"x")]
        with pytest.raises(UnknownTopicOrPartitionError):
            log.delete_topic("gone")
        log.create_topic("gone", 1)  # and the name is free again, empty
        assert log.partition("gone", 0).log_end_offset == 0
    with Log(data_dir, SMALL) as log:
        assert log.topics() == {"gone": 1}


def test_unfinished_create_and_delete_are_cleaned_on_open(data_dir):
    with Log(data_dir, SMALL) as log:
        log.create_topic("keep", 1)
    (data_dir / "@staging" / "abc" / "0").mkdir(parents=True)
    (data_dir / "@deleted" / "old.1" / "0").mkdir(parents=True)
    with Log(data_dir, SMALL) as log:
        assert log.topics() == {"keep": 1}
    assert not (data_dir / "@staging").exists() and not (data_dir / "@deleted").exists()


def test_directories_without_valid_metadata_are_ignored(data_dir, caplog):
    with Log(data_dir, SMALL) as log:
        log.create_topic("good", 1)
        log.create_topic("bad", 1)
    (data_dir / "bad" / "topic.json").write_text("{not json")
    (data_dir / "no-meta").mkdir()
    (data_dir / "stray-file").write_text("x")
    with caplog.at_level(logging.WARNING), Log(data_dir, SMALL) as log:
        assert log.topics() == {"good": 1}
        log.create_topic("no-meta", 1)  # a leftover without metadata is never a topic
        assert log.topics() == {"good": 1, "no-meta": 1}
    assert "bad" in caplog.text and "stray-file" in caplog.text


def test_one_log_per_data_directory(data_dir):
    with Log(data_dir, SMALL), pytest.raises(DataDirectoryLockedError):
        Log(data_dir, SMALL)
    Log(data_dir, SMALL).close()  # free again once closed


def test_retention_runs_over_every_partition(data_dir):
    import dataclasses
    config = dataclasses.replace(SMALL, retention_bytes=0)
    with Log(data_dir, config) as log:
        log.create_topic("a", 2)
        for p in range(2):
            for _ in range(20):
                log.partition("a", p).append(batch(b"v" * 400))
        assert log.apply_retention(now_ms=0) == 4
        assert all(log.partition("a", p).log_start_offset > 0 for p in range(2))


def test_delete_returns_while_an_append_holds_the_partition_and_the_files_go_after(
        data_dir, monkeypatch):
    # A produce still receiving its body holds the partition lock (the close waits for it) and
    # a big topic takes seconds to unlink: neither may hold up the caller (the caller
    # is a follower's fetch on the leader, or the replication loop).
    unlink_may_go = threading.Event()
    real_rmtree = shutil.rmtree

    def slow_rmtree(path, *args, **kwargs):
        assert unlink_may_go.wait(30)
        real_rmtree(path, *args, **kwargs)

    with Log(data_dir, SMALL) as log:
        log.create_topic("big", 2)
        partition = log.partition("big", 1)
        partition.append(batch(b"x"))
        monkeypatch.setattr(reaper_module.shutil, "rmtree", slow_rmtree)
        with partition._lock:  # an append in flight
            log.delete_topic("big")
            assert log.topics() == {} and not (data_dir / "big").exists()
            assert not log.wait_deletes_done(0.05)  # the close waits for the append
        assert not log.wait_deletes_done(0.05)  # the unlink waits for its turn
        assert len(list((data_dir / "@deleted").iterdir())) == 1
        unlink_may_go.set()
        assert log.wait_deletes_done(10.0)
        assert list((data_dir / "@deleted").iterdir()) == []
        with pytest.raises(PartitionClosedError):
            partition.append(batch(b"y"))


def test_a_delete_pending_at_close_is_finished_by_the_next_open(data_dir, monkeypatch):
    never = threading.Event()
    monkeypatch.setattr(reaper_module, "CLOSE_JOIN_S", 0.1)
    with Log(data_dir, SMALL) as log:
        log.create_topic("a", 1)
        log.create_topic("b", 1)
        monkeypatch.setattr(reaper_module.shutil, "rmtree", lambda path: never.wait(5))
        log.delete_topic("a")
        log.delete_topic("b")
    monkeypatch.undo()
    try:
        assert len(list((data_dir / "@deleted").iterdir())) == 2
        with Log(data_dir, SMALL) as log:
            assert log.topics() == {}
            assert not (data_dir / "@deleted").exists()
    finally:
        never.set()
