"""Writers that count what the cluster acknowledged, and the checks on what it stored.

Every record names its writer, the writer's producer generation (a new Producer after each
failed send), the batch sequence and its index in the batch: `writer|generation|seq|i|pad`.
So a record read back is traced to one send, and a record stored twice is caught whatever
offsets it got.

Rules checked (`check_acknowledged`):
- offsets read back are dense from 0 to the high watermark;
- no record is stored twice (acknowledged or not: a failed send may land, but at most once);
- every acknowledged record is stored, at the offset the acknowledgement named (when it named
  one), and one writer's acknowledged records are stored in the order they were acknowledged
  (each ack came before the next send);
- within one producer generation, records are stored in send order.

`DirectWriter` / `direct_send_in_background` produce to one broker over one connection with
no metadata and no retries, so every answer is known to come from that broker (the isolated
or paused leader).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from common.kaska import Producer
from common.kaska.connection import BrokerConnection
from common.kaska.errors import KaskaError
from common.kaska.producer import UNKNOWN_OFFSET
from common.kaska.protocol.produce import ACKS_ALL, ProduceRequest
from common.kaska.range_reader import RangeReader
from common.kaska.record_batch import encode_batch
from common.kaska.retry import RetryPolicy

# Retries that outlast an election or a broker restart (each attempt at most 4 s).
RIDE_OUT_RETRY = RetryPolicy(retries_max=30, backoff_s_initial=0.02, backoff_s_max=0.3)
CLIENT_TIMEOUTS = {"request_timeout_s": 4.0, "connect_timeout_s": 1.0}
PROGRESS_TIMEOUT_S = 40.0


def batch_values(writer: str, generation: int, sequence: int, rng: random.Random
                 ) -> list[bytes]:
    count = rng.randint(1, 5)
    pad = b"." * rng.randint(0, 200)
    return [b"%s|%d|%d|%d|" % (writer.encode(), generation, sequence, i) + pad
            for i in range(count)]


def parse_value(value: bytes) -> tuple[str, int, int, int]:
    writer, generation, sequence, index, _ = value.split(b"|", 4)
    return writer.decode(), int(generation), int(sequence), int(index)


@dataclass
class Ack:
    """One acknowledged batch."""

    base_offset: int  # UNKNOWN_OFFSET: a retry found it stored, too old to say where
    values: list[bytes]
    sent_at: float  # time.monotonic() when the send began
    acked_at: float


@dataclass
class Tally:
    """What one writer was told: acknowledged batches in order, and failed sends."""

    partition: int
    acks: list[Ack] = field(default_factory=list)
    failures: int = 0
    last_failure: str = ""
    unexpected: list[str] = field(default_factory=list)  # non-retriable errors


class AckedWriter(threading.Thread):
    """Sends batches with the library Producer (acks=all) through `bootstrap` until `stop`.
    A send that raised is unacknowledged; the writer then starts a new producer (a new id),
    as an application would, since the old one's next sequence may leave a gap."""

    def __init__(self, name: str, bootstrap: str, topic: str, partition: int, seed: int,
                 stop: threading.Event, progress: threading.Condition,
                 pause_s: float = 0.0) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.progress = progress
        self.pause_s = pause_s
        self.tally = Tally(partition)
        self.generation = 0

    def _producer(self) -> Producer:
        return Producer(self.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS)

    def run(self) -> None:
        producer = self._producer()
        try:
            while not self.stop_event.is_set():
                if not self.send_one(producer):
                    producer.close()
                    self.generation += 1
                    producer = self._producer()
                    self.stop_event.wait(0.05)
                elif self.pause_s:
                    self.stop_event.wait(self.pause_s)
        except BaseException as exc:  # a thread cannot fail the test: the test reads this
            self.tally.unexpected.append(f"{self.name} crashed: {exc!r}")
            raise
        finally:
            with _quiet():
                producer.close()

    def send_one(self, producer: Producer) -> bool:
        """One batch; True when acknowledged."""
        partition = self.tally.partition
        sequence = producer.next_sequence(self.topic, partition)
        values = batch_values(self.name, self.generation, sequence, self.rng)
        sent_at = time.monotonic()
        try:
            base_offset = producer.send_batch(self.topic, partition, values)
        except KaskaError as error:
            with self.progress:
                self.tally.failures += 1
                self.tally.last_failure = f"{type(error).__name__}: {error}"
                if not error.retriable:
                    self.tally.unexpected.append(f"{self.name} gen {self.generation} seq "
                                                 f"{sequence}: {error!r}")
            return False
        with self.progress:
            self.tally.acks.append(Ack(base_offset, values, sent_at, time.monotonic()))
            self.progress.notify_all()
        return True


class _quiet:
    """Suppress client errors on close (a producer's flush has nothing open here)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        return exc_type is not None and issubclass(exc_type, KaskaError)


def start_writers(bootstrap: str, topic: str, partitions: list[int], seed: int,
                  stop: threading.Event, progress: threading.Condition,
                  prefix: str = "w", pause_s: float = 0.0) -> list[AckedWriter]:
    writers = [AckedWriter(f"{prefix}{k}", bootstrap, topic, partition, seed + k, stop,
                           progress, pause_s) for k, partition in enumerate(partitions)]
    for writer in writers:
        writer.start()
    return writers


def wait_for_acks(writers: list[AckedWriter], progress: threading.Condition, more: int = 1,
                  timeout_s: float = PROGRESS_TIMEOUT_S, what: str = "") -> None:
    """Block until every writer has `more` acknowledgements more than now."""
    with progress:
        marks = [len(writer.tally.acks) for writer in writers]
        done = progress.wait_for(
            lambda: all(len(w.tally.acks) >= m + more
                        for w, m in zip(writers, marks, strict=True)), timeout_s)
        state = {w.name: (len(w.tally.acks), w.tally.failures, w.tally.last_failure)
                 for w in writers}
    assert done, (f"{what}: a writer got no acknowledgement in {timeout_s:.0f} s "
                  f"(acks, failures, last failure): {state}")


def stop_writers(writers: list[AckedWriter], stop: threading.Event) -> None:
    stop.set()
    for writer in writers:
        writer.join(60)
        assert not writer.is_alive(), f"{writer.name} did not stop"


# -- direct sends: one broker, one connection, no metadata, no retries ----------------------

# Longer than the broker's own wait for acks (10 s), so a direct send sees the broker's answer.
DIRECT_REQUEST_TIMEOUT_S = 12.0


@dataclass
class DirectSend:
    values: list[bytes]
    started: float
    finished: float = 0.0
    base_offset: int | None = None  # set when acknowledged
    error: str = ""
    local_port: int | None = None  # this end of its connection, once connected


class DirectWriter(threading.Thread):
    """Produces to one broker only, one batch at a time, each with a fresh producer id (no
    idempotence state ties two sends together) and never retried."""

    def __init__(self, name: str, address: tuple[str, int], topic: str, partition: int,
                 stop: threading.Event, seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.address = address
        self.topic = topic
        self.partition = partition
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.sends: list[DirectSend] = []
        self.crash = ""

    def run(self) -> None:
        connection: BrokerConnection | None = None
        sequence = 0
        try:
            while not self.stop_event.is_set():
                values = batch_values(self.name, 0, sequence, self.rng)
                sequence += 1
                send = DirectSend(values, time.monotonic())
                with self.lock:
                    self.sends.append(send)
                if connection is None or not connection.alive:
                    connection = direct_connection(self.address, send)
                if connection is not None:
                    produce_direct(connection, self.topic, self.partition, send)
                if send.base_offset is None:
                    self.stop_event.wait(0.05)
                self.stop_event.wait(0.02)
        except BaseException as exc:  # the test reads this
            self.crash = repr(exc)
            raise
        finally:
            if connection is not None:
                connection.close()

    def snapshot(self) -> list[DirectSend]:
        with self.lock:
            return [send for send in self.sends if send.finished]

    def tally(self) -> Tally:
        acks = [Ack(send.base_offset, send.values, send.started, send.finished)
                for send in self.snapshot() if send.base_offset is not None]
        return Tally(self.partition, acks=acks)


def direct_connection(address: tuple[str, int], send: DirectSend) -> BrokerConnection | None:
    """A connection for direct sends; None (and `send` marked failed) when it cannot connect."""
    try:
        connection = BrokerConnection(address, connect_timeout_s=1.0,
                                      request_timeout_s=DIRECT_REQUEST_TIMEOUT_S)
    except KaskaError as error:
        send.error = f"{type(error).__name__}: {error}"
        send.finished = time.monotonic()
        return None
    send.local_port = connection.local_address[1]
    return connection


def produce_direct(connection: BrokerConnection, topic: str, partition: int,
                   send: DirectSend) -> None:
    """Produce `send.values` (acks=all) as one batch of a fresh producer; record the answer."""
    batch = encode_batch(send.values, producer_id=uuid.uuid4().bytes, sequence=0)
    try:
        response = connection.request(ProduceRequest(topic, partition, ACKS_ALL, batch))
        send.base_offset = response.base_offset
    except KaskaError as error:
        send.error = f"{type(error).__name__}: {error}"
    send.finished = time.monotonic()


def direct_send_in_background(address: tuple[str, int], topic: str, partition: int,
                              values: list[bytes]) -> tuple[DirectSend, threading.Thread]:
    """Connect and send at once from a thread (to a paused broker, the request waits in its
    socket); join the thread, then read the DirectSend."""
    send = DirectSend(values, time.monotonic())

    def run() -> None:
        connection = direct_connection(address, send)
        if connection is not None:
            try:
                produce_direct(connection, topic, partition, send)
            finally:
                connection.close()

    thread = threading.Thread(target=run, daemon=True, name="direct-send")
    thread.start()
    return send, thread


# -- reading back ---------------------------------------------------------------------------

def read_back(bootstrap: str, topic: str, partitions: list[int]
              ) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, int]]:
    """Every record below each partition's high watermark, through the bootstrap list:
    ({partition: [(offset, value)]}, {partition: high watermark})."""
    stored, high_watermarks = {}, {}
    with RangeReader(bootstrap, retry_deadline_s=30.0, request_timeout_s=5.0,
                     connect_timeout_s=1.0) as reader:
        for partition in partitions:
            start, high_watermark = reader.offsets(topic, partition)
            assert start == 0, f"{topic}/{partition} starts at {start}"
            stored[partition] = [(record.offset, record.value)
                                 for record in reader.read(topic, partition, 0, high_watermark)]
            high_watermarks[partition] = high_watermark
    return stored, high_watermarks


@dataclass
class CheckCounts:
    acked_batches: int = 0
    acked_records: int = 0
    stored_records: int = 0
    unacked_stored: int = 0  # records of failed sends that did land (once)


def check_acknowledged(stored: dict[int, list[tuple[int, bytes]]], tallies: dict[str, Tally]
                       ) -> CheckCounts:
    counts = CheckCounts()
    every_value = [value for records in stored.values() for _, value in records]
    twice = [value for value, n in Counter(every_value).items() if n > 1]
    assert not twice, (f"{len(twice)} record(s) stored twice, e.g. "
                       f"{[v[:30] for v in twice[:5]]}")
    where_stored: dict[bytes, tuple[int, int]] = {}
    for partition, records in stored.items():
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(len(records))), \
            f"partition {partition}: offsets read back are not dense from 0"
        last_place: dict[tuple[str, int], tuple[int, int]] = {}
        for offset, value in records:
            where_stored[value] = (partition, offset)
            writer, generation, sequence, index = parse_value(value)
            place = (sequence, index)
            previous = last_place.get((writer, generation))
            assert previous is None or place > previous, \
                f"{writer} gen {generation}: out of order in partition {partition} at " \
                f"offset {offset}: {value[:30]!r} after {previous}"
            last_place[(writer, generation)] = place
    counts.stored_records = len(every_value)
    acked_values = set()
    for name, tally in tallies.items():
        last_offset = -1
        for ack in tally.acks:
            counts.acked_batches += 1
            for i, value in enumerate(ack.values):
                counts.acked_records += 1
                acked_values.add(value)
                place = where_stored.get(value)
                assert place is not None, \
                    f"{name}: acknowledged record {value[:30]!r} (offset " \
                    f"{ack.base_offset + i if ack.base_offset != UNKNOWN_OFFSET else '?'}) " \
                    f"is lost: not below the high watermark"
                partition, offset = place
                assert partition == tally.partition, f"{name}: {value[:30]!r} in {partition}"
                if ack.base_offset != UNKNOWN_OFFSET:
                    assert offset == ack.base_offset + i, \
                        f"{name}: {value[:30]!r} acknowledged at {ack.base_offset + i}, " \
                        f"stored at {offset}"
                assert offset > last_offset, \
                    f"{name}: acknowledged {value[:30]!r} stored at {offset}, before an " \
                    f"earlier acknowledgement's record at {last_offset}"
                last_offset = offset
    counts.unacked_stored = len(set(every_value) - acked_values)
    return counts


def check_replicas_identical(cluster, topic: str, partitions: list[int],
                             high_watermarks: dict[int, int]) -> int:
    """After stop_all: every broker holds the same bytes of [0, high watermark). Returns the
    bytes compared (per broker)."""
    compared = 0
    for partition in partitions:
        hw = high_watermarks[partition]
        stored = cluster.stored_partitions(topic, partition, upto_offset=hw)
        ends = {i: (s.log_start_offset, s.log_end_offset, len(s.data))
                for i, s in stored.items()}
        for i, s in stored.items():
            assert s.log_start_offset == 0 and s.log_end_offset >= hw, \
                f"{topic}/{partition}: broker {i} holds [{s.log_start_offset}, " \
                f"{s.log_end_offset}), short of the high watermark {hw}; all: {ends}"
        reference = stored[cluster.ids[0]].data
        differing = [i for i, s in stored.items() if s.data != reference]
        assert not differing, \
            f"{topic}/{partition}: bytes of [0, {hw}) differ on brokers {differing} from " \
            f"broker {cluster.ids[0]}'s; (start, end, bytes): {ends}; first difference at " \
            f"byte {_first_difference(reference, stored[differing[0]].data)}"
        compared += len(reference)
    return compared


def _first_difference(a: bytes, b: bytes) -> int:
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return min(len(a), len(b))
