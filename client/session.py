"""A client session's control side: its topics and its records on the shared `sessions` topic.

Opening creates `airports.<cid>` and `flights.<cid>` with P partitions (an existing topic with
another partition count is refused: the message-id mapping depends on P) and `results.<cid>`
and `sessions` with one partition each. SessionStarted is written once the airports file is
acknowledged, with the end offset of every airports partition (exact, like SessionEnded's), and
before any flights batch, so the query service may read the airports whole as soon as it sees it.

Exactly-once on `sessions`, a topic every client shares: each client writes with producer id =
its client id (a UUID, unique per session) on partition 0, with fixed sequence numbers,
SessionStarted = 0, SessionEnded = 1 and, once the results are saved, ResultsAcked = 2. The
broker keeps a sequence space per (partition, producer id), so clients never collide, and a
resumed client re-sending any of them gets the duplicate answer (or DuplicateSequenceError,
older than the broker's memory: stored too) instead of a second copy. The broker forgets
producers only beyond its `producer_ids_max` per partition; past that a repeat could be stored
again, and it would be byte-identical (same end offsets and counts), so a reader keyed by
client id still sees one session. The resume checkpoint also records that SessionEnded and
ResultsAcked were acknowledged, so a restart does not re-send them. A repeated ResultsAcked is
harmless anyway: deleting topics that are gone already does nothing.

`end_offsets` asks the broker for the log end of every partition of the session's data topics;
it is exact because only this client writes them and every batch is acknowledged by then.

Every call rides out broker restarts (`common.kaska.patience`). Thread-safety: one `SessionControl`
per client thread; only `log_start` may be called from several threads at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from common.flights.session_records import (
    SESSIONS_TOPIC,
    ResultsAcked,
    SessionEnded,
    SessionStarted,
    airports_topic,
    encode,
    flights_topic,
    results_topic,
)
from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import (
    DuplicateSequenceError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from common.kaska.patience import STALL_TIMEOUT_S_DEFAULT, persist

log = logging.getLogger(__name__)

SESSION_STARTED_SEQUENCE = 0
SESSION_ENDED_SEQUENCE = 1
RESULTS_ACKED_SEQUENCE = 2
SESSIONS_PARTITION = 0
T = TypeVar("T")


class SessionError(Exception):
    """Base of the session-control errors."""


class TopicLayoutError(SessionError):
    """A session topic exists with another partition count than this session needs."""


def data_topics(client_id: str) -> dict[str, str]:
    """File name -> topic, in upload order."""
    return {"airports": airports_topic(client_id), "flights": flights_topic(client_id)}


class SessionControl:
    def __init__(self, admin: Admin, producer: Producer, consumer: Consumer,
                 client_id: str, partitions: int, stop: threading.Event,
                 stall_timeout_s: float = STALL_TIMEOUT_S_DEFAULT) -> None:
        assert partitions >= 1
        self.admin = admin
        self.producer = producer
        self.consumer = consumer
        self.client_id = client_id
        self.partitions = partitions
        self.stop = stop
        self.stall_timeout_s = stall_timeout_s
        self._consumer_lock = threading.Lock()

    def _persist(self, call: Callable[[], T], what: str) -> T:
        return persist(call, what, self.stop, self.stall_timeout_s)

    def create_topics(self) -> None:
        wanted = {topic: self.partitions for topic in data_topics(self.client_id).values()}
        wanted[results_topic(self.client_id)] = 1
        wanted[SESSIONS_TOPIC] = 1
        for topic, partitions in wanted.items():
            self._persist(lambda t=topic, p=partitions: self._ensure_topic(t, p),
                          f"create topic {topic}")

    def _ensure_topic(self, topic: str, partitions: int) -> None:
        """Create `topic`, or check the one that exists has `partitions`. Both answers are
        committed ones: "already exists" is told once the existing topic is committed, and the
        topic list is the metadata leader's committed one, so a topic missing from it was
        deleted in between: UnknownTopicOrPartitionError (retriable), and `persist` creates
        it again."""
        try:
            self.admin.create_topic(topic, partitions)
            return
        except TopicAlreadyExistsError:
            pass  # a resumed session, or `sessions` made by another client: check its shape
        existing = self.admin.topics().get(topic)
        if existing is None:
            raise UnknownTopicOrPartitionError(f"topic {topic} existed, then was deleted "
                                               "before its partitions were read; creating it "
                                               "again")
        if existing != partitions:
            raise TopicLayoutError(
                f"topic {topic} has {existing} partitions; this session needs {partitions}")

    def write_started(self, airports_end_offsets: list[int]) -> None:
        assert len(airports_end_offsets) == self.partitions
        self._write(encode(SessionStarted(self.client_id, self.partitions,
                                          list(airports_end_offsets))),
                    SESSION_STARTED_SEQUENCE)

    def write_ended(self, ended: SessionEnded) -> None:
        assert ended.client_id == self.client_id
        self._write(encode(ended), SESSION_ENDED_SEQUENCE)

    def write_acked(self, rows_per_query: dict[str, int]) -> None:
        """The results are on disk (`rows_per_query` rows of each query, when known): the query
        service may delete the session's topics."""
        self._write(encode(ResultsAcked(self.client_id, dict(rows_per_query))),
                    RESULTS_ACKED_SEQUENCE)

    def _write(self, payload: bytes, sequence: int) -> None:
        def write_once() -> None:
            try:
                self.producer.send_batch(SESSIONS_TOPIC, SESSIONS_PARTITION, [payload],
                                         sequence=sequence)
            except DuplicateSequenceError:
                log.info("sessions record %d of %s was already stored", sequence,
                         self.client_id)

        self._persist(write_once, f"sessions record {sequence}")

    def end_offsets(self) -> dict[str, list[int]]:
        return {topic: self.topic_end_offsets(topic)
                for topic in data_topics(self.client_id).values()}

    def topic_end_offsets(self, topic: str) -> list[int]:
        return [self._persist(lambda p=p: self.consumer.end_offset(topic, p),
                              f"end offset of {topic}/{p}")
                for p in range(self.partitions)]

    def log_start(self, topic: str, partition: int) -> int:
        """The partition's log start offset (ListOffsets earliest), riding out the broker.
        Called by the uploader's sender threads: one at a time, as the consumer is not
        thread-safe (the lock is held per attempt, not across the pauses between them)."""
        def ask() -> int:
            with self._consumer_lock:
                return self.consumer.start_offset(topic, partition)

        return self._persist(ask, f"log start of {topic}/{partition}")
