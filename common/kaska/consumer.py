"""Consumer: subscribe to topics, poll records one at a time, seek, commit.

Positions are the next offset to read, per (topic, partition). `subscribe` assigns every
partition of each topic (no group rebalancing: each consumer reads all of them) and starts
each at the group's committed offset, or at the end (only new messages) when none is
committed. `seek` also assigns a partition on its own (manual assignment). `commit` stores a
position for the group; `committed` reads it back.

`poll` serves buffered records first, then fetches round-robin: caught-up partitions are
asked without waiting except the last one of the round, which long-polls the broker (the
whole timeout when one partition is assigned, `multi_partition_wait_ms` otherwise, so data
on another partition waits at most that long).

Not thread-safe: use one consumer per thread (as Kafka's).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from time import monotonic

from common.kaska.cluster import Cluster
from common.kaska.message import Message
from common.kaska.protocol import (
    CommitOffsetRequest,
    FetchCommittedRequest,
    FetchRequest,
    ListOffsetsRequest,
    MessageLengthRequest,
)
from common.kaska.protocol.fetch_committed import NO_COMMITTED_OFFSET
from common.kaska.record_batch import iter_batches, iter_records
from common.kaska.topic_name import OFFSETS_TOPIC, validate_topic_name

FETCH_BYTES_MAX_DEFAULT = 1024 * 1024
MULTI_PARTITION_WAIT_MS_DEFAULT = 100

TopicPartition = tuple[str, int]
# Commits go to the broker leading the partition of `__offsets` that stores them.
OFFSETS_ROUTE = (OFFSETS_TOPIC, 0)


class Consumer:
    def __init__(self, brokers: str | Sequence[str], group: str = "g", *,
                 token: str | None = None, fetch_bytes_max: int = FETCH_BYTES_MAX_DEFAULT,
                 multi_partition_wait_ms: int = MULTI_PARTITION_WAIT_MS_DEFAULT,
                 **cluster_options) -> None:
        self.group = group
        self._cluster = Cluster(brokers, token=token, **cluster_options)
        self._fetch_bytes_max = fetch_bytes_max
        self._multi_partition_wait_ms = multi_partition_wait_ms
        self._positions: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, deque[Message]] = {}
        self._rotation = 0

    # -- assignment --------------------------------------------------------------------------

    def subscribe(self, topics: str | Iterable[str]) -> None:
        """Read every partition of these topics (replacing the previous subscription)."""
        names = [topics] if isinstance(topics, str) else list(topics)
        wanted: set[TopicPartition] = set()
        for topic in names:
            validate_topic_name(topic)
            wanted.update((topic, p) for p in range(self._cluster.partition_count(topic)))
        for key in [key for key in self._positions if key not in wanted]:
            self._unassign(key)
        for key in sorted(wanted - set(self._positions)):
            committed = self.committed(*key)
            self._assign(key, committed if committed is not None else self.end_offset(*key))

    def unsubscribe(self) -> None:
        for key in list(self._positions):
            self._unassign(key)

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._positions)

    def _assign(self, key: TopicPartition, position: int) -> None:
        self._positions[key] = position
        self._buffers[key] = deque()

    def _unassign(self, key: TopicPartition) -> None:
        del self._positions[key]
        del self._buffers[key]

    def position(self, topic: str, partition: int = 0) -> int:
        """The offset the next poll of this partition returns."""
        key = (topic, partition)
        if key not in self._positions:
            raise ValueError(f"{topic}/{partition} is not assigned: subscribe or seek first")
        return self._positions[key]

    def seek(self, topic: str, offset: int, partition: int = 0) -> None:
        """Read this partition from `offset` on (assigning it if needed)."""
        validate_topic_name(topic)
        if offset < 0:
            raise ValueError("offsets are >= 0")
        self._assign((topic, partition), offset)

    # -- reading -----------------------------------------------------------------------------

    def poll(self, timeout_s: float = 0.0) -> Message | None:
        """The next record of the assigned partitions, or None after timeout_s."""
        if not self._positions:
            raise ValueError("poll with nothing assigned: subscribe or seek first")
        deadline = monotonic() + max(0.0, timeout_s)
        while True:
            message = self._take_buffered()
            if message is not None:
                return message
            remaining_ms = int((deadline - monotonic()) * 1000)
            if not self._fetch_round(max(0, remaining_ms)) and remaining_ms <= 0:
                return None

    def _take_buffered(self) -> Message | None:
        for key, buffer in self._buffers.items():
            if buffer:
                message = buffer.popleft()
                self._positions[key] = message.offset + 1
                return message
        return None

    def _fetch_round(self, remaining_ms: int) -> bool:
        """Fetch partitions in turn until one yields records; True if one did."""
        keys = sorted(self._positions)
        start = self._rotation % len(keys)
        order = keys[start:] + keys[:start]
        self._rotation += 1
        last_wait_ms = remaining_ms if len(keys) == 1 else min(remaining_ms,
                                                               self._multi_partition_wait_ms)
        for i, key in enumerate(order):
            wait_ms = last_wait_ms if i == len(order) - 1 else 0
            if self._fetch_into_buffer(key, wait_ms):
                return True
        return False

    def _fetch_into_buffer(self, key: TopicPartition, wait_ms: int) -> bool:
        topic, partition = key
        position = self._positions[key]
        request = FetchRequest(topic, partition, position, self._fetch_bytes_max, wait_ms)
        response = self._cluster.call(request, route=key, server_wait_s=wait_ms / 1000)
        buffer = self._buffers[key]
        for header, batch in iter_batches(response.records):
            for offset, value in iter_records(batch, header):
                if offset >= position:
                    buffer.append(Message(topic, partition, offset, value, header.producer_id,
                                          header.sequence, header.timestamp_ms))
        return bool(buffer)

    # -- offsets -----------------------------------------------------------------------------

    def end_offset(self, topic: str, partition: int = 0) -> int:
        """The high watermark: the offset the next record written will get."""
        return self._list_offsets(topic, partition).log_end_offset

    def start_offset(self, topic: str, partition: int = 0) -> int:
        """The first offset still stored (retention moves it)."""
        return self._list_offsets(topic, partition).log_start_offset

    def _list_offsets(self, topic: str, partition: int):
        return self._cluster.call(ListOffsetsRequest(topic, partition), route=(topic, partition))

    def msg_length(self, topic: str, offset: int, partition: int = 0) -> int:
        """Byte length of the record at `offset`."""
        request = MessageLengthRequest(topic, partition, offset)
        return self._cluster.call(request, route=(topic, partition)).length

    def commit(self, topic: str, offset: int, partition: int = 0) -> None:
        """Store `offset` (the next one to read) as this group's position."""
        self._cluster.call(CommitOffsetRequest(self.group, topic, partition, offset),
                           route=OFFSETS_ROUTE)

    def committed(self, topic: str, partition: int = 0) -> int | None:
        """This group's committed offset, None when it never committed."""
        response = self._cluster.call(FetchCommittedRequest(self.group, topic, partition),
                                      route=OFFSETS_ROUTE)
        return None if response.offset == NO_COMMITTED_OFFSET else response.offset

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
