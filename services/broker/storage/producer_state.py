"""ProducerStateTable: idempotent-producer deduplication for one partition (Kafka's
ProducerStateManager, without transactions).

State: producer id → its last `BATCHES_REMEMBERED` appended batches as (sequence, base offset,
record count), oldest first. One table per PartitionLog, so the (producer id, partition) key
of the design is (table, producer id). Sequence numbers count batches: a producer's batches on
one partition are numbered 0, 1, 2, ...

Rules for an incoming batch (`check`):
- producer id all zero: not idempotent, always appended;
- unknown producer: any sequence is accepted (a producer may start mid-stream, e.g. after
  its earlier batches were deleted by retention or forgotten beyond `producer_ids_max`);
- sequence == last + 1: appended;
- sequence equal to a remembered one: a retry; answered with the original base offset and
  record count, nothing stored;
- sequence <= last but no longer remembered: DuplicateSequenceError;
- sequence > last + 1: OutOfOrderSequenceError (a batch in between was never stored).

Not persisted on its own: the partition rebuilds it on open by feeding every batch header of
the log to `load` (headers only), so it is exactly as durable as the log. Bounded: at most
`producer_ids_max` producers, least recently appended forgotten first.

Thread-safety: none; the owning PartitionLog calls it under its lock.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from common.kaska.errors import (
    CorruptBatchError,
    DuplicateSequenceError,
    OutOfOrderSequenceError,
)
from common.kaska.record_batch import BatchHeader

BATCHES_REMEMBERED = 5


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    sequence: int
    base_offset: int
    record_count: int


class ProducerStateTable:
    def __init__(self, producer_ids_max: int):
        assert producer_ids_max >= 1
        self.producer_ids_max = producer_ids_max
        self._batches: OrderedDict[bytes, deque[ProducerBatch]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._batches)

    def check(self, header: BatchHeader) -> ProducerBatch | None:
        """None when the batch is to be appended, the original batch when it is a retry;
        raises DuplicateSequenceError / OutOfOrderSequenceError per the rules above."""
        if not header.idempotent:
            return None
        if header.sequence < 0:
            raise CorruptBatchError(f"idempotent batch with sequence {header.sequence}")
        batches = self._batches.get(header.producer_id)
        if not batches:
            return None
        last = batches[-1].sequence
        if header.sequence == last + 1:
            return None
        for batch in batches:
            if batch.sequence == header.sequence:
                return batch
        if header.sequence <= last:
            raise DuplicateSequenceError(
                f"sequence {header.sequence} is older than the last {len(batches)} batches "
                f"remembered (last {last})")
        raise OutOfOrderSequenceError(f"sequence {header.sequence} after {last}: "
                                      f"{header.sequence - last - 1} batch(es) missing")

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Remember an appended batch (after check said append, or when loading the log)."""
        if not header.idempotent:
            return
        pid = header.producer_id
        batches = self._batches.get(pid)
        if batches is None:
            batches = self._batches[pid] = deque(maxlen=BATCHES_REMEMBERED)
            if len(self._batches) > self.producer_ids_max:
                self._batches.popitem(last=False)
        else:
            self._batches.move_to_end(pid)
        batches.append(ProducerBatch(header.sequence, base_offset, header.record_count))

    def load(self, header: BatchHeader) -> None:
        """Feed one batch header of the log, in log order (rebuild on open)."""
        self.record(header, header.base_offset)

    def clear(self) -> None:
        self._batches.clear()

    def last_sequence(self, producer_id: bytes) -> int | None:
        batches = self._batches.get(producer_id)
        return batches[-1].sequence if batches else None
