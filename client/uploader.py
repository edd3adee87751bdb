"""Uploads one CSV file to its topic: one slice = one Arrow IPC record = one record batch.

Message ids number the file's slices from 0; `client.message_ids` maps each to its partition and
its per-partition sequence, and the producer (producer id = client id) sends it with exactly that
sequence, so the broker stores every message once whatever is re-sent:
- a retry after a lost answer is answered with the original offset (broker dedup table);
- after a restart (resume), messages below the checkpoint are skipped without being encoded,
  and those between the checkpoint and what the broker really holds are re-sent; the broker
  answers them as duplicates, or with DuplicateSequenceError when they are older than the few
  batches it remembers per producer, which here means "already stored" too (the broker never
  stores a sequence out of order, so every sequence below its last one is stored).

One batch is in flight at a time (the producer's rule), so acknowledgements arrive in message
id order and "acknowledged" is always a prefix of the file. Slices are encoded (Arrow IPC,
zstd) on a helper thread, up to `prefetch_batches_max` ahead, so compression overlaps the
round trips to the broker.

Failures: a message is re-sent (same sequence) through broker restarts by `client.patience`,
whose errors (`BrokerStalledError`, `BrokerRefusedError`, `StoppedWhileWaitingError`) pass
through. A set stop event ends the upload between two messages with `UploadInterruptedError`.
Thread-safety: one `FileUploader` per thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from client.csv_reader import CsvSliceReader
from client.message_ids import place
from client.patience import STALL_TIMEOUT_S_DEFAULT, persist
from common.arrow_rows import encode_rows
from common.kaska import Producer
from common.kaska.errors import DuplicateSequenceError

log = logging.getLogger(__name__)

PREFETCH_BATCHES_MAX_DEFAULT = 16


class UploadInterruptedError(Exception):
    """The stop event was set (SIGTERM): the upload stopped between two messages."""


@dataclass(frozen=True, slots=True)
class EncodedSlice:
    message_id: int
    rows: int
    payload: bytes | None  # None for a slice skipped on resume (already acknowledged)


@dataclass
class FileUploadResult:
    messages: int  # the file's messages, all acknowledged
    rows: int  # rows sent (acknowledged now or before a restart)
    messages_sent: int  # sent by this run (the broker drops those it already holds)
    messages_skipped: int  # acknowledged before a restart, not sent again
    payload_bytes: int  # bytes sent by this run


@dataclass(frozen=True, slots=True)
class UploadSettings:
    stall_timeout_s: float = STALL_TIMEOUT_S_DEFAULT
    prefetch_batches_max: int = PREFETCH_BATCHES_MAX_DEFAULT


AckCallback = Callable[[int, int], None]  # (messages acknowledged so far, rows in this message)


class FileUploader:
    def __init__(self, producer: Producer, topic: str, partitions: int,
                 stop: threading.Event, settings: UploadSettings = UploadSettings()) -> None:
        assert partitions >= 1
        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.stop = stop
        self.settings = settings

    def upload(self, reader: CsvSliceReader, messages_acked: int,
               on_ack: AckCallback) -> FileUploadResult:
        """Send every slice from message id `messages_acked` on; calls `on_ack` after each."""
        result = FileUploadResult(messages=0, rows=0, messages_sent=0, messages_skipped=0,
                                  payload_bytes=0)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode") as pool:
            for item in _prefetched(self._numbered(reader, messages_acked), pool,
                                    self.settings.prefetch_batches_max):
                if self.stop.is_set():
                    raise UploadInterruptedError(f"stopped before {self.topic} message "
                                                 f"{item.message_id}")
                self._deliver(item, result, on_ack)
        return result

    def _deliver(self, item: EncodedSlice, result: FileUploadResult,
                 on_ack: AckCallback) -> None:
        if item.payload is None:
            result.messages_skipped += 1
        else:
            self._send(item)
            result.messages_sent += 1
            result.payload_bytes += len(item.payload)
        result.messages = item.message_id + 1
        result.rows += item.rows
        on_ack(result.messages, item.rows)

    @staticmethod
    def _numbered(reader: CsvSliceReader,
                  messages_acked: int) -> Iterator[tuple[int, pa.RecordBatch, bool]]:
        """(message id, rows, acknowledged before a restart) per slice."""
        for message_id, rows in enumerate(reader.slices()):
            yield message_id, rows, message_id < messages_acked

    def _send(self, item: EncodedSlice) -> None:
        placement = place(item.message_id, self.partitions)

        def send_once() -> None:
            try:
                self.producer.send_batch(self.topic, placement.partition, [item.payload],
                                         sequence=placement.sequence)
            except DuplicateSequenceError:
                log.debug("%s message %d was already stored", self.topic, item.message_id)

        persist(send_once, f"{self.topic} message {item.message_id}", self.stop,
                       self.settings.stall_timeout_s)


def _prefetched(slices: Iterator[tuple[int, pa.RecordBatch, bool]], pool: ThreadPoolExecutor,
                depth: int) -> Iterator[EncodedSlice]:
    """Slices encoded on `pool` (skipped ones are not), at most `depth` ahead, in order."""
    pending: deque[tuple[int, int, Future | None]] = deque()
    for message_id, rows, skipped in slices:
        future = None if skipped else pool.submit(encode_rows, rows)
        pending.append((message_id, rows.num_rows, future))
        if len(pending) >= depth:
            yield _finished(*pending.popleft())
    while pending:
        yield _finished(*pending.popleft())


def _finished(message_id: int, rows: int, future: Future | None) -> EncodedSlice:
    return EncodedSlice(message_id, rows, None if future is None else future.result())
