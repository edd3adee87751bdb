"""Where a data message goes: message id -> (partition, sequence number).

A file's slices are numbered 0, 1, 2, ... (the message id) and spread round-robin over the
topic's P partitions:

    partition = message_id % P        sequence = message_id // P

so each partition receives the dense sequence 0, 1, 2, ... the broker's idempotent-producer
table expects (producer id = client id; sequences count batches per partition), and the
mapping is a pure function of the message id. A resumed client therefore re-sends a message
with exactly the partition and sequence it had the first time, and the broker recognises it.
The inverse (`message_id`) lets a reader put a partition's batches back in file order.

Pure functions; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Placement:
    partition: int
    sequence: int


def place(message_id: int, partitions: int) -> Placement:
    assert message_id >= 0 and partitions >= 1
    sequence, partition = divmod(message_id, partitions)
    return Placement(partition, sequence)


def message_id(placement: Placement, partitions: int) -> int:
    assert 0 <= placement.partition < partitions and placement.sequence >= 0
    return placement.sequence * partitions + placement.partition
