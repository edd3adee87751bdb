"""Kafka's idempotent producer identity on top of Kaska's.

Kaska dedups by (16-byte producer id, per-partition sequence) in the partition's producer table
(storage/producer_state.py); Kafka by (int64 producer id, int16 epoch, int32 base sequence).
One mechanism serves both: a Kafka producer's (id, epoch) becomes a 16-byte Kaska producer id

    0   4  KAFKA_PRODUCER_PREFIX  b"KFK\\x00" (common/kaska/record_batch.py)
    4   2  epoch                  i16
    6   2  zero                   (byte 6 is a UUIDv4's version nibble 4: no Kaska id collides)
    8   8  producer id            i64

and Kafka's base sequence is stored as the batch's sequence unchanged. The producer table knows
such ids by their prefix and expects their next sequence at base + record count (mod 2^31),
as Kafka does; a retry of a remembered batch is answered with its original offset; a new epoch
is a new id, so its sequences start again at 0, which is what Kafka's epoch bump means.

InitProducerId hands out random 62-bit ids: unique without coordination between brokers (no
transactions, so no transactional id has to map to one id); two producers draw the same id with
probability ~n^2 / 2^63. Pure; thread-safe (the random source is the caller's).
"""

from __future__ import annotations

import random
import struct

from common.kaska.record_batch import KAFKA_PRODUCER_PREFIX, NO_PRODUCER, NO_SEQUENCE

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
PRODUCER_EPOCH_MAX = (1 << 15) - 1
PRODUCER_ID_BITS = 62
_LAYOUT = struct.Struct(">4sh2xq")
assert _LAYOUT.size == 16


def kaska_producer_id(producer_id: int, epoch: int) -> bytes:
    """The 16-byte Kaska id of a Kafka producer; NO_PRODUCER for a non-idempotent one."""
    if producer_id == NO_PRODUCER_ID:
        return NO_PRODUCER
    assert producer_id >= 0 and 0 <= epoch <= PRODUCER_EPOCH_MAX, (producer_id, epoch)
    return _LAYOUT.pack(KAFKA_PRODUCER_PREFIX, epoch, producer_id)


def kafka_producer(kaska_id: bytes, sequence: int) -> tuple[int, int, int]:
    """(producer id, epoch, base sequence) Kafka consumers see for a stored batch; a batch of a
    Kaska producer (a UUID) or of none has no Kafka identity: (-1, -1, -1)."""
    if not kaska_id.startswith(KAFKA_PRODUCER_PREFIX):
        return NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
    _prefix, epoch, producer_id = _LAYOUT.unpack(kaska_id)
    return producer_id, epoch, sequence


def new_producer_id(rng: random.Random) -> int:
    return rng.getrandbits(PRODUCER_ID_BITS)


def next_identity(rng: random.Random, producer_id: int, epoch: int) -> tuple[int, int]:
    """What InitProducerId answers: a fresh id at epoch 0, or -- when the client names its
    current (id, epoch), KIP-360's bump after an error -- the same id at the next epoch."""
    if producer_id >= 0 and 0 <= epoch < PRODUCER_EPOCH_MAX:
        return producer_id, epoch + 1
    return new_producer_id(rng), 0
