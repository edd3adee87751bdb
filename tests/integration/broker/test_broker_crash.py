"""SIGKILL a broker process at random moments while several producers write to it, restart it
on the same data directory and port, and check that every acknowledged record is stored
exactly once, in order, and that committed offsets survive.

Writers (threads of this test process, each with its own connection):
- idempotent writers: the library Producer with retries that ride out each restart;
- explicit-sequence writers: a Producer that never retries on its own; after a failure it
  waits and re-sends from a few batches back (a client resuming from a checkpoint that does
  not know how far it got), expecting each re-sent batch to be answered with its original
  offset;
- a committer: commits growing offsets for a group throughout.

Randomness (kill moments, batch sizes, rewinds) is seeded: set KASKA_CRASH_SEED to replay a
run; the seed is printed and named in every failure message.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import KaskaError
from common.kaska.producer import UNKNOWN_OFFSET
from common.kaska.retry import RetryPolicy
from tests.integration.broker.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("KASKA_CRASH_SEED", "20260"))
CYCLES = 20
PARTITIONS = 3
TOPIC = "crash"
GROUP = "crash-group"
# Small segments, so the kills also land around segment rolls and recovery walks many files.
SEGMENT_BYTES_MAX = 128 * 1024
# Retries that outlast a restart (~0.3 s, longer on a loaded machine): up to ~10 s.
RIDE_OUT_RETRY = RetryPolicy(retries_max=100, backoff_s_initial=0.01, backoff_s_max=0.1)
CLIENT_TIMEOUTS = {"request_timeout_s": 10.0, "connect_timeout_s": 2.0}
NO_RETRY = RetryPolicy(retries_max=0)
PROGRESS_TIMEOUT_S = 15.0
REWIND_BATCHES_MAX = 4  # the broker remembers a producer's last 5 batches


def batch_values(writer: str, generation: int, sequence: int, rng: random.Random
                 ) -> list[bytes]:
    """Records naming their writer and place, so each can be traced back and told apart."""
    count = rng.randint(1, 8)
    pad = b"." * rng.randint(0, 300)
    return [b"%s|%d|%d|%d|" % (writer.encode(), generation, sequence, i) + pad
            for i in range(count)]


def parse_value(value: bytes) -> tuple[str, int, int, int]:
    writer, generation, sequence, index, _ = value.split(b"|", 4)
    return writer.decode(), int(generation), int(sequence), int(index)


@dataclass
class Acked:
    """What one writer has been told is stored: record values by acknowledged offset."""

    records: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    unplaced: list[bytes] = field(default_factory=list)  # acked with UNKNOWN_OFFSET
    batches: int = 0


class Writer(threading.Thread):
    """Base of the writer threads: run until `stop`, count acknowledgements, keep errors."""

    def __init__(self, name: str, broker: BrokerProcess, partition: int, seed: int,
                 stop: threading.Event, progress: threading.Condition) -> None:
        super().__init__(name=name, daemon=True)
        self.broker = broker
        self.partition = partition
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.progress = progress
        self.acked = Acked()
        self.errors: list[str] = []

    def note_ack(self, base_offset: int, values: list[bytes]) -> None:
        with self.progress:
            if base_offset == UNKNOWN_OFFSET:
                self.acked.unplaced.extend(values)
            else:
                for i, value in enumerate(values):
                    self.acked.records[base_offset + i] = value
            self.acked.batches += 1
            self.progress.notify_all()

    def run(self) -> None:
        try:
            self.write()
        except BaseException as exc:  # the test thread reports it; a thread cannot fail a test
            self.errors.append(f"{self.name} crashed: {exc!r}")
            raise


class IdempotentWriter(Writer):
    """The library Producer with retries through every restart. When it does give up, the
    batch is unacknowledged (it may or may not be stored, but at most once) and the writer
    goes on as a new producer, as an application would."""

    def write(self) -> None:
        generation = 0
        producer = Producer(self.broker.address, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS)
        try:
            while not self.stop_event.is_set():
                sequence = producer.next_sequence(TOPIC, self.partition)
                values = batch_values(self.name, generation, sequence, self.rng)
                try:
                    base_offset = producer.send_batch(TOPIC, self.partition, values)
                except KaskaError as error:
                    if not error.retriable:  # only a broker down for too long is expected
                        self.errors.append(f"{self.name}: seq {sequence}: {error!r}")
                        return
                    producer.close()
                    generation += 1
                    producer = Producer(self.broker.address, retry=RIDE_OUT_RETRY,
                                        **CLIENT_TIMEOUTS)
                    continue
                self.note_ack(base_offset, values)
        finally:
            producer.close()


class ExplicitSequenceWriter(Writer):
    """Sends batch `s` with an explicit sequence and no library retries; after a failure it
    re-sends from `newest - k` (newest: the highest sequence built so far, k random, 0..4)
    with the very same records. A re-sent batch that
    was acknowledged before must come back with its first offset."""

    def write(self) -> None:
        producer_id = self.rng.randbytes(16)
        sent: list[list[bytes]] = []  # values of sequence s, once built
        first_offsets: dict[int, int] = {}
        sequence = 0
        producer = Producer(self.broker.address, producer_id=producer_id, retry=NO_RETRY,
                            **CLIENT_TIMEOUTS)
        try:
            while not self.stop_event.is_set():
                if sequence == len(sent):
                    sent.append(batch_values(self.name, 0, sequence, self.rng))
                try:
                    base_offset = producer.send_batch(TOPIC, self.partition, sent[sequence],
                                                      sequence=sequence)
                except KaskaError as error:
                    if not error.retriable:
                        self.errors.append(f"{self.name}: seq {sequence}: {error!r}")
                        return
                    self.stop_event.wait(0.02)
                    newest = len(sent) - 1  # rewind from the newest batch ever built
                    sequence = newest - self.rng.randint(0, min(REWIND_BATCHES_MAX, newest))
                    continue
                known = first_offsets.get(sequence)
                if known is None:
                    first_offsets[sequence] = base_offset
                    self.note_ack(base_offset, sent[sequence])
                elif known != base_offset:
                    self.errors.append(f"{self.name}: seq {sequence} re-sent, answered "
                                       f"{base_offset}, first stored at {known}")
                sequence += 1
        finally:
            producer.close()


class Committer(threading.Thread):
    """Commits 1, 2, 3, ... for (GROUP, TOPIC, 0); remembers the last acknowledged value and
    the last one attempted (which may or may not have been stored)."""

    def __init__(self, broker: BrokerProcess, stop: threading.Event) -> None:
        super().__init__(name="committer", daemon=True)
        self.broker = broker
        self.stop_event = stop
        self.last_acked = 0
        self.last_attempted = 0
        self.errors: list[str] = []

    def run(self) -> None:
        consumer = Consumer(self.broker.address, group=GROUP, retry=RIDE_OUT_RETRY,
                            **CLIENT_TIMEOUTS)
        try:
            while not self.stop_event.is_set():
                value = self.last_attempted + 1
                self.last_attempted = value
                try:
                    consumer.commit(TOPIC, value)
                except KaskaError as error:
                    if not error.retriable:
                        self.errors.append(f"committer: {error!r}")
                        return
                    continue
                self.last_acked = value
                self.stop_event.wait(0.005)
        except BaseException as exc:
            self.errors.append(f"committer crashed: {exc!r}")
            raise
        finally:
            consumer.close()


def wait_for_every_writer(writers: list[Writer], progress: threading.Condition,
                          seed: int) -> None:
    """Block until each writer has one acknowledgement more than now (so the next kill lands
    while all of them are producing)."""
    with progress:
        marks = [writer.acked.batches for writer in writers]
        done = progress.wait_for(
            lambda: all(w.acked.batches > m for w, m in zip(writers, marks, strict=True))
            or any(w.errors for w in writers), PROGRESS_TIMEOUT_S)
    errors = [error for writer in writers for error in writer.errors]
    assert not errors, f"seed {seed}: {errors}"
    assert done, f"seed {seed}: a writer made no progress in {PROGRESS_TIMEOUT_S} s"


def read_partition(broker: BrokerProcess, partition: int) -> list[tuple[int, bytes]]:
    with Consumer(broker.address, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as consumer:
        end = consumer.end_offset(TOPIC, partition)
        consumer.seek(TOPIC, 0, partition)
        records = []
        while len(records) < end:
            message = consumer.poll(5)
            assert message is not None, f"poll found nothing below the end offset {end}"
            records.append((message.offset, message.value))
        return records


def check_log(stored: dict[int, list[tuple[int, bytes]]], writers: list[Writer],
              seed: int) -> None:
    where = f"seed {seed}"
    every_value = [value for records in stored.values() for _, value in records]
    twice = [value for value, n in Counter(every_value).items() if n > 1]
    assert not twice, f"{where}: {len(twice)} record(s) stored twice, e.g. {twice[0][:40]!r}"
    for partition, records in stored.items():
        assert [offset for offset, _ in records] == list(range(len(records))), where
        last_place: dict[tuple[str, int], tuple[int, int]] = {}
        for _offset, value in records:
            writer, generation, sequence, index = parse_value(value)
            place = (sequence, index)
            previous = last_place.get((writer, generation))
            assert previous is None or place > previous, \
                f"{where}: {writer} out of order in partition {partition}: {value[:40]!r}"
            last_place[(writer, generation)] = place
    for writer in writers:
        log = dict(stored[writer.partition])
        for offset, value in writer.acked.records.items():
            assert log.get(offset) == value, \
                f"{where}: {writer.name}'s acknowledged record at {offset} is {log.get(offset)!r}"
        present = set(every_value)
        assert all(value in present for value in writer.acked.unplaced), where


def run_chaos(broker: BrokerProcess, rng: random.Random) -> tuple[list[Writer], Committer]:
    """Writers and committer running through CYCLES kill/restart cycles; stopped and joined
    before returning."""
    stop = threading.Event()
    progress = threading.Condition()
    writers: list[Writer] = [IdempotentWriter(f"idem{p}", broker, p, SEED + p, stop, progress)
                             for p in range(PARTITIONS)]
    # A second idempotent producer on partition 0 interleaves with the first.
    writers.append(IdempotentWriter("idem0b", broker, 0, SEED + 10, stop, progress))
    writers += [ExplicitSequenceWriter(f"explicit{p}", broker, p, SEED + 20 + p, stop,
                                       progress) for p in (0, 2)]
    committer = Committer(broker, stop)
    threads = [*writers, committer]
    try:
        for thread in threads:
            thread.start()
        for _ in range(CYCLES):
            wait_for_every_writer(writers, progress, SEED)
            time.sleep(rng.uniform(0.0, 0.15))  # a random moment in the produce stream
            assert broker.alive(), f"seed {SEED}: the broker died before its kill"
            broker.kill()
            assert broker.proc.returncode == -signal.SIGKILL, "the kill is what ended it"
            broker.start()
        wait_for_every_writer(writers, progress, SEED)  # they all got through the last one
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join(30)
    return writers, committer


@pytest.mark.timeout(120)
def test_acknowledged_records_survive_repeated_sigkill_exactly_once(tmp_path):
    print(f"broker crash test seed {SEED} (replay: KASKA_CRASH_SEED={SEED})")
    rng = random.Random(SEED)
    broker = BrokerProcess(tmp_path / "data", "--segment-bytes-max", str(SEGMENT_BYTES_MAX))
    try:
        broker.start()
        with Admin(broker.address, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS)
        writers, committer = run_chaos(broker, rng)
        errors = [error for thread in [*writers, committer] for error in thread.errors]
        assert not errors, f"seed {SEED}: {errors}"
        # One more crash with nothing written after it: what is read now was recovered.
        broker.kill()
        broker.start()
        stored = {p: read_partition(broker, p) for p in range(PARTITIONS)}
        check_log(stored, writers, SEED)
        with Consumer(broker.address, group=GROUP, retry=RIDE_OUT_RETRY,
                      **CLIENT_TIMEOUTS) as consumer:
            committed = consumer.committed(TOPIC)
        assert committer.last_acked >= CYCLES, f"seed {SEED}: too few commits to judge"
        assert committed is not None and \
            committer.last_acked <= committed <= committer.last_attempted, \
            f"seed {SEED}: committed {committed}, acked {committer.last_acked}"
        acked_batches = sum(writer.acked.batches for writer in writers)
        print(f"{CYCLES + 1} kills; {acked_batches} batches acknowledged; "
              f"{sum(len(r) for r in stored.values())} records stored")
    finally:
        broker.kill()
