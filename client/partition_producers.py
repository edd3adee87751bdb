"""One idempotent Producer per partition, all with the client's producer id.

A `Producer` keeps one batch in flight at a time (its answer fixes the next sequence), so the
uploader's sender threads each get their own: the broker's dedup table is per (producer id,
partition), and every partition still sees its sequences one after the other from one sender.
Each Producer has its own connections, so a slow answer on one partition holds up no other.

Thread-safety: `send_batch` may be called from several threads at once for different
partitions (never for one partition from two threads); `close` once, after the senders ended.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from common.kaska import Producer


class PartitionProducers:
    def __init__(self, brokers: str, producer_id: str, **producer_options) -> None:
        self._brokers = brokers
        self._producer_id = producer_id
        self._options = producer_options
        self._lock = threading.Lock()
        self._producers: dict[int, Producer] = {}

    def send_batch(self, topic: str, partition: int, payloads: Sequence[bytes],
                   sequence: int | None = None) -> int:
        return self._producer(partition).send_batch(topic, partition, payloads,
                                                    sequence=sequence)

    def _producer(self, partition: int) -> Producer:
        with self._lock:
            producer = self._producers.get(partition)
            if producer is None:
                producer = Producer(self._brokers, self._producer_id, **self._options)
                self._producers[partition] = producer
            return producer

    def close(self) -> None:
        with self._lock:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            producer.close()
