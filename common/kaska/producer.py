"""Idempotent, batching producer.

Every batch carries this producer's 16-byte id and a sequence number, dense from 0 per
(topic, partition) and advanced by one per batch, so the broker stores a retried batch once
and answers it with its original offset. A retry re-sends the very same batch bytes; a
DuplicateSequence answer to a retry means an earlier attempt was stored, which is success.

Two ways to send:
- `send_msg` / `send_batch` send at once and return the offset (one record per batch, or
  the given records as one batch);
- `send` adds a record to the partition's open batch and returns a future of its offset; the
  batch goes out when it reaches `batch_bytes_max` / `batch_records_max`, or on `flush()`.

Thread-safe: one lock keeps each partition's batches in sequence order, and only one batch is
in flight at a time per producer (its answer fixes the next sequence number).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Future

from common.kaska.cluster import Cluster
from common.kaska.errors import DuplicateSequenceError, KaskaError
from common.kaska.protocol.produce import ACKS_ALL, ProduceRequest
from common.kaska.record_batch import RECORD_LENGTH_BYTES, encode_batch

UNKNOWN_OFFSET = -1  # a retry found its batch stored but too old for the broker to say where
BATCH_BYTES_MAX_DEFAULT = 1024 * 1024
BATCH_RECORDS_MAX_DEFAULT = 100_000


def producer_id_bytes(producer_id: bytes | str | uuid.UUID | None) -> bytes:
    """16 bytes from a UUID, its text form, 16 raw bytes, or None (a fresh uuid4)."""
    if producer_id is None:
        return uuid.uuid4().bytes
    if isinstance(producer_id, uuid.UUID):
        return producer_id.bytes
    if isinstance(producer_id, str):
        return uuid.UUID(producer_id).bytes
    if len(producer_id) != 16:
        raise ValueError("a producer id is 16 bytes")
    return bytes(producer_id)


class _OpenBatch:
    __slots__ = ("payloads", "futures", "nbytes")

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.futures: list[Future] = []
        self.nbytes = 0


class Producer:
    def __init__(self, brokers: str | Sequence[str], producer_id=None, *,
                 token: str | None = None, acks: int = ACKS_ALL,
                 batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
                 batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT, **cluster_options) -> None:
        self.producer_id = producer_id_bytes(producer_id)
        self._cluster = Cluster(brokers, token=token, **cluster_options)
        self._acks = acks
        self._batch_bytes_max = batch_bytes_max
        self._batch_records_max = batch_records_max
        self._lock = threading.RLock()
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._open: dict[tuple[str, int], _OpenBatch] = {}

    # -- sending at once ---------------------------------------------------------------------

    def send_msg(self, topic: str, payload: bytes, partition: int = 0) -> int:
        """Send one record as its own batch; its offset."""
        return self.send_batch(topic, partition, [payload])

    def send_batch(self, topic: str, partition: int, payloads: Sequence[bytes],
                   sequence: int | None = None) -> int:
        """Send the payloads as one batch; the offset of the first.

        `sequence` overrides the next sequence number (a client resuming an upload, or a
        writer with deterministic ids); later batches continue from it.
        """
        with self._lock:
            self._flush_partition((topic, partition))
            return self._send_now(topic, partition, payloads, sequence)

    def next_sequence(self, topic: str, partition: int = 0) -> int:
        with self._lock:
            return self._next_sequence.get((topic, partition), 0)

    def _send_now(self, topic: str, partition: int, payloads: Sequence[bytes],
                  sequence: int | None) -> int:
        key = (topic, partition)
        if sequence is None:
            sequence = self._next_sequence.get(key, 0)
        batch = encode_batch(payloads, producer_id=self.producer_id, sequence=sequence)
        request = ProduceRequest(topic, partition, self._acks, batch)
        try:
            response = self._cluster.call(request, route=key,
                                          ok_after_delivery=(DuplicateSequenceError,))
        except KaskaError as error:
            if error.maybe_delivered:
                # The broker may hold this sequence: reusing it for other records could be
                # taken for a retry and dropped. Move on; a gap is reported loudly instead.
                self._next_sequence[key] = sequence + 1
            raise
        self._next_sequence[key] = sequence + 1
        return UNKNOWN_OFFSET if response is None else response.base_offset

    # -- batching ----------------------------------------------------------------------------

    def send(self, topic: str, payload: bytes, partition: int = 0) -> Future:
        """Add a record to the partition's open batch; a future of its offset. When the record
        fills the batch it is sent here, and a failure is raised here too (and set on the
        batch's futures)."""
        future: Future = Future()
        key = (topic, partition)
        with self._lock:
            batch = self._open.setdefault(key, _OpenBatch())
            batch.payloads.append(payload)
            batch.futures.append(future)
            batch.nbytes += RECORD_LENGTH_BYTES + len(payload)
            if (batch.nbytes >= self._batch_bytes_max
                    or len(batch.payloads) >= self._batch_records_max):
                self._flush_partition(key)
        return future

    def flush(self) -> None:
        """Send every open batch; raises the first error (each future holds its own)."""
        first_error: KaskaError | None = None
        with self._lock:
            for key in list(self._open):
                try:
                    self._flush_partition(key)
                except KaskaError as error:
                    first_error = first_error or error
        if first_error is not None:
            raise first_error

    def _flush_partition(self, key: tuple[str, int]) -> None:
        batch = self._open.pop(key, None)
        if batch is None:
            return
        try:
            base_offset = self._send_now(key[0], key[1], batch.payloads, None)
        except KaskaError as error:
            for future in batch.futures:
                future.set_exception(error)
            raise
        for i, future in enumerate(batch.futures):
            future.set_result(UNKNOWN_OFFSET if base_offset == UNKNOWN_OFFSET
                              else base_offset + i)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
