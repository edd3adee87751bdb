"""The nemesis's clients: idempotent acks=all producers, consumers, and the topic churner,
each a thread recording what it did into one `History`.

`TopicGate` holds, per topic, the nemesis's incarnation count and a readers-writer lock:
producers and consumers send and read under the shared side, the churner deletes and
re-creates under the exclusive side (waiting writers go first). So every attempt and every
read knows the incarnation it went to, exactly, and a delete + re-create never overlaps one.

Producers send one record a batch (`Producer.send_msg`, acks=all) to a random topic and
partition, value `p<producer>-<n>@<topic>#<incarnation>` (history.encode_value). Outcome: ack
(with its offset), maybe (the client says an attempt may have been stored), fail (it says
none was). A client keeps its producer after a failure, as an application would (the
producer re-sends the same sequence number), and opens a fresh producer id after a
maybe-delivered failure or an out-of-order answer, where the old one cannot go on.
Consumers read every partition of a topic from offset 0 of each incarnation; a read error
drops the consumer (a fresh one resumes at the same offsets).

Thread-safety: the gate is; the history's lists are appended to from every thread.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import (
    KaskaError,
    OutOfOrderSequenceError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from common.kaska.retry import RetryPolicy
from scripts.nemesis.history import (
    ACK,
    FAIL,
    MAYBE,
    History,
    ProduceAttempt,
    ReadRecord,
    encode_value,
)

# A send or read rides out an election and a restart (~10 s of retries), and gives up within
# about a minute when the cluster cannot serve, so a round always ends.
CLIENT_OPTIONS = {"request_timeout_s": 5.0, "connect_timeout_s": 2.0,
                  "retry": RetryPolicy(retries_max=25, backoff_s_initial=0.05,
                                       backoff_s_max=0.5)}
PRODUCE_PAUSE_S = 0.01  # between two sends of one producer: the machine is shared
POLL_S = 0.2
READ_SLICE_S = 1.0  # a consumer holds a topic's shared lock at most this long at a time
CHURN_TIMEOUT_S = 180.0
CHURN_RETRY_PAUSE_S = 0.5


class ChurnStalledError(RuntimeError):
    """A topic could not be deleted and created again within CHURN_TIMEOUT_S."""


@dataclass
class ChurnMark:
    """Set by the churner once the topic's incarnation is deleted (a churn that stalls before
    leaves the incarnation as it was)."""

    deleted: bool = False


class TopicGate:
    def __init__(self, topics: tuple[str, ...]) -> None:
        self._incarnations = dict.fromkeys(topics, 1)
        self._readers = dict.fromkeys(topics, 0)
        self._writer = dict.fromkeys(topics, False)
        self._writers_waiting = dict.fromkeys(topics, 0)
        self._condition = threading.Condition()

    def incarnation(self, topic: str) -> int:
        with self._condition:
            return self._incarnations[topic]

    def incarnations(self) -> dict[str, int]:
        with self._condition:
            return dict(self._incarnations)

    @contextlib.contextmanager
    def shared(self, topic: str) -> Iterator[int]:
        """Hold the topic's incarnation steady; yields it."""
        with self._condition:
            self._condition.wait_for(lambda: not self._writer[topic]
                                     and not self._writers_waiting[topic])
            self._readers[topic] += 1
            incarnation = self._incarnations[topic]
        try:
            yield incarnation
        finally:
            with self._condition:
                self._readers[topic] -= 1
                self._condition.notify_all()

    @contextlib.contextmanager
    def exclusive(self, topic: str) -> Iterator[ChurnMark]:
        """Alone with the topic; its incarnation counts one more on leaving once the yielded
        mark says the old one is deleted."""
        with self._condition:
            self._writers_waiting[topic] += 1
            self._condition.wait_for(lambda: not self._writer[topic]
                                     and not self._readers[topic])
            self._writers_waiting[topic] -= 1
            self._writer[topic] = True
        mark = ChurnMark()
        try:
            yield mark
        finally:
            with self._condition:
                self._writer[topic] = False
                if mark.deleted:
                    self._incarnations[topic] += 1
                self._condition.notify_all()


@dataclass
class WorkloadShape:
    bootstrap: str
    topics: tuple[str, ...]
    partitions: int
    producers: int
    consumers: int
    seed: int


@dataclass
class Stats:
    """Counts the summary reports; each written by one thread."""

    churned: list[str] = field(default_factory=list)
    churn_errors: list[str] = field(default_factory=list)
    read_errors: int = 0


def create_topics(shape: WorkloadShape) -> None:
    with Admin(shape.bootstrap, **CLIENT_OPTIONS) as admin:
        for topic in shape.topics:
            admin.create_topic(topic, shape.partitions)


class ProducerLoop(threading.Thread):
    def __init__(self, index: int, shape: WorkloadShape, gate: TopicGate, history: History,
                 stop: threading.Event) -> None:
        super().__init__(name=f"nemesis-producer-{index}", daemon=True)
        self.index = index
        self.shape = shape
        self.gate = gate
        self.history = history
        self.stop = stop
        self.finished = False  # False after the thread ended: it died of an exception

    def run(self) -> None:
        rng = random.Random(self.shape.seed * 1000 + self.index)
        producer = Producer(self.shape.bootstrap, **CLIENT_OPTIONS)
        n = 0
        try:
            while not self.stop.is_set():
                topic = rng.choice(self.shape.topics)
                partition = rng.randrange(self.shape.partitions)
                with self.gate.shared(topic) as incarnation:
                    attempt, fresh = self._send(producer, n, topic, partition, incarnation)
                self.history.attempts.append(attempt)
                if fresh:
                    producer.close()
                    producer = Producer(self.shape.bootstrap, **CLIENT_OPTIONS)
                n += 1
                time.sleep(PRODUCE_PAUSE_S)
        finally:
            producer.close()
        self.finished = True

    def _send(self, producer: Producer, n: int, topic: str, partition: int,
              incarnation: int) -> tuple[ProduceAttempt, bool]:
        """The attempt, and whether the producer must be replaced."""
        value = encode_value(self.index, n, topic, incarnation)
        try:
            offset = producer.send_msg(topic, value, partition)
        except KaskaError as error:
            text = f"{type(error).__name__}: {error}"
            outcome = MAYBE if error.maybe_delivered else FAIL
            fresh = error.maybe_delivered or isinstance(error, OutOfOrderSequenceError)
            return ProduceAttempt(self.index, n, topic, partition, incarnation, outcome,
                                  error=text), fresh
        return ProduceAttempt(self.index, n, topic, partition, incarnation, ACK, offset), False


class ConsumerLoop(threading.Thread):
    def __init__(self, index: int, shape: WorkloadShape, gate: TopicGate, history: History,
                 stats: Stats, stop: threading.Event) -> None:
        super().__init__(name=f"nemesis-consumer-{index}", daemon=True)
        self.reader = f"consumer-{index}"
        self.shape = shape
        self.gate = gate
        self.history = history
        self.stats = stats
        self.stop = stop
        self.finished = False
        # Per topic: the incarnation read, the next offset of each partition, the consumer.
        self._incarnation: dict[str, int] = {}
        self._positions: dict[str, dict[int, int]] = {}
        self._consumers: dict[str, Consumer] = {}

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for topic in self.shape.topics:
                    with self.gate.shared(topic) as incarnation:
                        self._read_slice(topic, incarnation)
        finally:
            for consumer in self._consumers.values():
                consumer.close()
        self.finished = True

    def _consumer(self, topic: str, incarnation: int) -> Consumer:
        if self._incarnation.get(topic) != incarnation:
            self._drop(topic)
            self._incarnation[topic] = incarnation
            self._positions[topic] = dict.fromkeys(range(self.shape.partitions), 0)
        if topic not in self._consumers:
            consumer = Consumer(self.shape.bootstrap, **CLIENT_OPTIONS)
            for partition, offset in self._positions[topic].items():
                consumer.seek(topic, offset, partition)
            self._consumers[topic] = consumer
        return self._consumers[topic]

    def _drop(self, topic: str) -> None:
        consumer = self._consumers.pop(topic, None)
        if consumer is not None:
            consumer.close()

    def _read_slice(self, topic: str, incarnation: int) -> None:
        consumer = self._consumer(topic, incarnation)
        deadline = time.monotonic() + READ_SLICE_S
        try:
            while time.monotonic() < deadline and not self.stop.is_set():
                message = consumer.poll(POLL_S)
                if message is None:
                    return
                self.history.reads.append(ReadRecord(self.reader, topic, message.partition,
                                                     incarnation, message.offset,
                                                     message.value))
                self._positions[topic][message.partition] = message.offset + 1
        except KaskaError:
            self.stats.read_errors += 1
            self._drop(topic)


class Churner(threading.Thread):
    """Deletes and re-creates the topics it is handed (`churn(topic)`), one at a time. Each
    churn gives up after CHURN_TIMEOUT_S; after `finish()` whatever is still queued or under
    way gives up CHURN_TIMEOUT_S after the finish at the latest (reported as stalled)."""

    def __init__(self, shape: WorkloadShape, gate: TopicGate, stats: Stats) -> None:
        super().__init__(name="nemesis-churner", daemon=True)
        self.shape = shape
        self.gate = gate
        self.stats = stats
        self._requests: queue.Queue[str | None] = queue.Queue()
        self._finish_deadline = float("inf")  # monotonic seconds; set by finish()
        self.finished = False

    def churn(self, topic: str) -> None:
        self._requests.put(topic)

    def finish(self) -> None:
        """Churn what was asked (within CHURN_TIMEOUT_S from now), then end."""
        self._finish_deadline = time.monotonic() + CHURN_TIMEOUT_S
        self._requests.put(None)

    def run(self) -> None:
        with Admin(self.shape.bootstrap, **CLIENT_OPTIONS) as admin:
            while (topic := self._requests.get()) is not None:
                with self.gate.exclusive(topic) as mark:
                    try:
                        self._recreate(admin, topic, mark)
                    except ChurnStalledError as error:
                        self.stats.churn_errors.append(str(error))
                self.stats.churned.append(topic)
        self.finished = True

    def _recreate(self, admin: Admin, topic: str, mark: ChurnMark) -> None:
        deadline = min(time.monotonic() + CHURN_TIMEOUT_S, self._finish_deadline)
        last_error = ""
        while True:  # the delete
            try:
                admin.delete_topic(topic)
                break
            except UnknownTopicOrPartitionError:
                break  # an earlier attempt of ours deleted it
            except KaskaError as error:
                last_error = f"delete: {type(error).__name__}: {error}"
            self._pause_or_give_up(topic, deadline, last_error)
        mark.deleted = True
        create_sent = False
        while True:  # the create
            try:
                admin.create_topic(topic, self.shape.partitions)
                return
            except TopicAlreadyExistsError as error:
                if create_sent:
                    return  # an earlier attempt of ours created it
                # The delete is acknowledged; the broker asked has not applied it yet.
                last_error = f"create: {type(error).__name__}: {error}"
            except KaskaError as error:
                create_sent = create_sent or error.maybe_delivered
                last_error = f"create: {type(error).__name__}: {error}"
            self._pause_or_give_up(topic, deadline, last_error)

    @staticmethod
    def _pause_or_give_up(topic: str, deadline: float, last_error: str) -> None:
        if time.monotonic() > deadline:
            raise ChurnStalledError(f"{topic}: not deleted and created again in time (at most "
                                    f"{CHURN_TIMEOUT_S:g} s); last: {last_error or 'none'}")
        time.sleep(CHURN_RETRY_PAUSE_S)
