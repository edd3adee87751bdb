"""Throw more than 10,000 random and mutated frames at a live broker process, then check that
it still serves correct data: earlier records intact, a produce/fetch round trip, nothing
written outside its data directory, its memory bounded, a clean stop and restart.

No answer may be an "unknown server error" (-1): that is an internal exception in the broker.
Frames come from seeded generators (frame_fuzzer.py), one per worker thread; set
KASKA_FUZZ_SEED to replay a run (the seed is printed and named in every failure), and
KASKA_FUZZ_FRAMES to throw more than the 10,000 frames of the suite.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import (
    CorruptBatchError,
    FrameTooLargeError,
    InvalidRequestError,
    InvalidTopicError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from common.kaska.topic_name import validate_topic_name
from services.broker.storage.log import DELETED_DIR
from tests.integration.broker.broker_process import CLIENT_OPTIONS, BrokerProcess
from tests.integration.broker.frame_fuzzer import (
    FUZZ_TOPICS,
    FrameFactory,
    FuzzClient,
    FuzzStats,
)

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("KASKA_FUZZ_SEED", "4242"))
FRAMES_MIN = int(os.environ.get("KASKA_FUZZ_FRAMES", "10000"))  # more for a deeper hunt
WORKERS = 2
FRAME_BYTES_MAX = 256 * 1024  # small, so oversized frames are cheap to send
FETCH_WAIT_MS_MAX = 100  # a mutated FETCH may ask to long-poll for hours
ANSWER_TIMEOUT_S = 10.0
RSS_BYTES_MAX = 300 * 1024 * 1024
KEPT_TOPIC = "kept-before-fuzz"  # no fuzzed frame can name it (see FUZZ_TOPICS)
# Every one of these must show up, or the fuzzer is not reaching the code it means to.
EXPECTED_CODES = {0, InvalidRequestError.code, CorruptBatchError.code, InvalidTopicError.code,
                  UnsupportedVersionError.code, FrameTooLargeError.code,
                  UnknownTopicOrPartitionError.code}


def write_kept_records(broker: BrokerProcess) -> dict[int, list[bytes]]:
    """Records written before the fuzz, by partition, to compare with afterwards."""
    rng = random.Random(SEED)
    kept = {p: [rng.randbytes(rng.randint(1, 500)) for _ in range(300)] for p in (0, 1)}
    with Admin(broker.address, **CLIENT_OPTIONS) as admin, \
            Producer(broker.address, **CLIENT_OPTIONS) as producer:
        admin.create_topic(KEPT_TOPIC, partitions=2)
        for topic in FUZZ_TOPICS:
            admin.create_topic(topic, partitions=3)
            producer.send_batch(topic, 0, [b"seed data"] * 30)
        for partition, values in kept.items():
            for start in range(0, len(values), 50):
                producer.send_batch(KEPT_TOPIC, partition, values[start:start + 50])
    return kept


def read_all(broker: BrokerProcess, topic: str, partition: int) -> list[bytes]:
    with Consumer(broker.address, **CLIENT_OPTIONS) as consumer:
        end = consumer.end_offset(topic, partition)
        consumer.seek(topic, 0, partition)
        values = []
        for offset in range(end):
            message = consumer.poll(5)
            assert message is not None and message.offset == offset
            values.append(message.value)
        return values


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the most resident memory the process has had so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def entries_outside_data_dir(data_dir: Path) -> set[str]:
    return {entry.name for entry in data_dir.parent.iterdir()}


def check_data_dir_contained(data_dir: Path) -> None:
    """Every path under the data directory is a real file or directory inside it; the top
    level holds only the broker's `@` entries and legal topic names."""
    root = data_dir.resolve()
    for top in data_dir.iterdir():
        if not top.name.startswith("@"):
            validate_topic_name(top.name)
    for parent, dirs, files in os.walk(data_dir):
        if Path(parent) == data_dir and DELETED_DIR in dirs:
            dirs.remove(DELETED_DIR)  # deleted topics, removed meanwhile by the reaper thread
        for name in dirs + files:
            path = Path(parent) / name
            assert not path.is_symlink(), path
            assert path.resolve().is_relative_to(root), path


def fuzz(broker: BrokerProcess, worker: int, frames_n: int, stats: FuzzStats) -> None:
    factory = FrameFactory(random.Random(SEED * 1000 + worker), FRAME_BYTES_MAX)
    client = FuzzClient(broker.host_port, ANSWER_TIMEOUT_S, stats)
    index = 0
    try:
        while stats.frames < frames_n:
            client.throw(factory.next(), index)
            index += 1
    except BaseException as exc:  # a thread cannot fail the test: the test reads problems
        stats.problems.append(f"worker {worker} stopped at frame {index}: {exc!r}")
        raise
    finally:
        client.close()


@pytest.mark.timeout(180 + FRAMES_MIN // 100)
def test_broker_survives_thousands_of_hostile_frames(tmp_path):
    print(f"broker fuzz seed {SEED} (replay: KASKA_FUZZ_SEED={SEED})")
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir, "--frame-bytes-max", str(FRAME_BYTES_MAX),
                           "--fetch-wait-ms-max", str(FETCH_WAIT_MS_MAX)).start()
    try:
        kept = write_kept_records(broker)
        outside_before = entries_outside_data_dir(data_dir)
        stats = [FuzzStats() for _ in range(WORKERS)]
        started = time.monotonic()
        threads = [threading.Thread(target=fuzz, args=(broker, worker,
                                                       FRAMES_MIN // WORKERS, stats[worker]))
                   for worker in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed_s = time.monotonic() - started

        frames = sum(s.frames for s in stats)
        codes = sum((s.codes for s in stats), Counter())
        kinds = sum((s.kinds for s in stats), Counter())
        problems = [problem for s in stats for problem in s.problems]
        print(f"{frames} frames over {sum(s.connections for s in stats)} connections in "
              f"{elapsed_s:.1f} s; answers by code {dict(sorted(codes.items()))}; "
              f"frames by kind {dict(sorted(kinds.items()))}")
        where = f"seed {SEED}"
        assert frames >= FRAMES_MIN, where
        assert broker.alive(), f"{where}: the broker died: {broker.tail()}"
        assert codes[UnknownServerError.code] == 0, \
            f"{where}: internal errors in the broker: {broker.tail()}"
        assert not problems, f"{where}: {problems[:5]}"
        assert set(codes) >= EXPECTED_CODES, f"{where}: codes seen {sorted(codes)}"
        peak_rss = peak_rss_bytes(broker.proc.pid)
        print(f"broker peak RSS {peak_rss / 2**20:.0f} MiB")
        assert peak_rss < RSS_BYTES_MAX, where

        for partition, values in kept.items():
            assert read_all(broker, KEPT_TOPIC, partition) == values, where
        with Producer(broker.address, **CLIENT_OPTIONS) as producer:
            base = producer.send_batch(KEPT_TOPIC, 0, [b"after", b"the fuzz"])
        assert read_all(broker, KEPT_TOPIC, 0)[base:] == [b"after", b"the fuzz"], where
        assert entries_outside_data_dir(data_dir) == outside_before, where
        check_data_dir_contained(data_dir)

        code, _ = broker.terminate()
        assert code == 0, f"{where}: {broker.tail()}"
        broker.start()
        assert read_all(broker, KEPT_TOPIC, 1) == kept[1], where
    finally:
        broker.kill()
