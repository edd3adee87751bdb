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

Pipeline (why: a produce with acks=all waits for a majority of brokers, so one message at a
time leaves the machine idle between round trips): the reader's slices go to a sender thread
per partition (at most `senders_max`, partition p going to sender p % senders), up to
`SENDER_QUEUE_DEPTH` waiting each; a sender encodes its slice (`common.flights.arrow_rows`:
Arrow and the codec release the GIL, so senders encode in parallel) and sends its partitions'
messages in sequence order, one at a time, as the broker's dedup table requires. So up to `senders`
batches are in flight, each partition's sequence stays dense and ordered, and
acknowledgements arrive out of message-id order across partitions. `on_ack` is still called
with the acknowledged *prefix* of the file (every message below it acknowledged), in order:
that prefix is what a resumed run may skip, and messages above it that were acknowledged too
are simply re-sent and dropped by the broker as duplicates.

Flow control (flights only, `window`: client.upload_window.UploadWindow): a sender waits before
producing to a partition whose acknowledged backlog above the log start is over its share of the
window, and tells the window each acknowledged record's offset and payload bytes. A resumed
upload sizes the skipped messages the window still counts by encoding them again (not sent).
While the main thread waits for the senders it calls `on_idle` (the progress display's "held
back" line), about every `ACK_POLL_S`.

Failures: a message is re-sent (same sequence) through broker restarts by `common.kaska.patience`,
whose errors (`BrokerStalledError`, `BrokerRefusedError`, `StoppedWhileWaitingError`) pass
through; the first error of any sender ends the upload, the other senders stop after their
current message. A set stop event ends the upload between two messages with
`UploadInterruptedError`; the senders start no message after it is set (those already sent
by then, at most one per sender, are simply re-sent by the resumed run).
Thread-safety: one `FileUploader` per thread; `producer.send_batch` is called from several
threads, never for one partition from two at once.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from client.csv_reader import CsvSliceReader
from client.message_ids import Placement, place
from client.upload_window import UploadInterruptedError, UploadWindow
from common.flights.arrow_rows import COMPRESSION_DEFAULT, encode_rows
from common.kaska.errors import DuplicateSequenceError
from common.kaska.patience import STALL_TIMEOUT_S_DEFAULT, persist
from common.kaska.producer import UNKNOWN_OFFSET

log = logging.getLogger(__name__)

SENDERS_MAX_DEFAULT = 8
SENDER_QUEUE_DEPTH = 4  # messages waiting per sender: enough to never leave one idle
ACK_POLL_S = 0.05


class UploadConfigError(ValueError):
    """An upload setting out of range."""


@dataclass(frozen=True, slots=True)
class Slice:
    message_id: int
    rows: pa.RecordBatch


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
    senders_max: int = SENDERS_MAX_DEFAULT
    compression: str | None = COMPRESSION_DEFAULT
    # A ceiling on the upload's pace, like a Kafka producer quota (0: none). Sizes an upload's
    # duration from below whatever the machine's speed: a fault test that must land its faults
    # while the upload runs sets it.
    rows_per_s_max: float = 0.0

    def __post_init__(self) -> None:
        if self.rows_per_s_max < 0:
            raise UploadConfigError(f"rows_per_s_max must be >= 0 (0: no ceiling), got "
                             f"{self.rows_per_s_max}")


AckCallback = Callable[[int, int], None]  # (messages acknowledged so far, rows in this message)


class AckedPrefix:
    """The acknowledged prefix of a file's message ids, from acknowledgements in any order."""

    def __init__(self, start: int) -> None:
        self.end = start  # every message id below it is acknowledged
        self._above: list[tuple[int, int]] = []  # (message id, rows), acknowledged, >= end

    def add(self, message_id: int, rows: int) -> list[tuple[int, int]]:
        """Record one acknowledgement; for each message the prefix grew by, in order, the
        prefix's new end and the message's rows."""
        heapq.heappush(self._above, (message_id, rows))
        grown = []
        while self._above and self._above[0][0] == self.end:
            self.end += 1
            grown.append((self.end, heapq.heappop(self._above)[1]))
        return grown


class UploadPacer:
    """Holds the upload back so that rows handed on never run ahead of `rows_per_s_max`
    since the pacer's start (0: never waits). The clock is injected for tests."""

    def __init__(self, rows_per_s_max: float, clock: Callable[[], float]) -> None:
        self.rows_per_s_max = rows_per_s_max
        self._clock = clock
        self._started_at = clock()
        self._rows = 0

    def delay_s(self, rows: int) -> float:
        """Seconds to wait before handing on `rows` more rows (counted as handed on)."""
        if self.rows_per_s_max <= 0:
            return 0.0
        due_at = self._started_at + self._rows / self.rows_per_s_max
        self._rows += rows
        return max(0.0, due_at - self._clock())


class _Senders:
    """One thread per sender, each sending its partitions' messages in order."""

    def __init__(self, uploader: FileUploader, count: int) -> None:
        self._uploader = uploader
        self.acks: queue.Queue[tuple[int, int, int]] = queue.Queue()  # id, rows, bytes
        self.failure: BaseException | None = None
        self._halt = threading.Event()
        self._inboxes = [queue.Queue(SENDER_QUEUE_DEPTH) for _ in range(count)]
        self._threads = [threading.Thread(target=self._run, args=(inbox,), daemon=True,
                                          name=f"send-{uploader.topic}-{i}")
                         for i, inbox in enumerate(self._inboxes)]
        for thread in self._threads:
            thread.start()

    def put(self, item: Slice, partition: int) -> None:
        inbox = self._inboxes[partition % len(self._inboxes)]
        while not self._halt.is_set():
            try:
                inbox.put(item, timeout=ACK_POLL_S)
                return
            except queue.Full:
                self._uploader.on_idle()

    def _run(self, inbox: queue.Queue) -> None:
        while True:
            item = inbox.get()
            if item is None or self._halt.is_set() or self._uploader.stop.is_set():
                return
            try:
                payload_bytes = self._uploader.send(item)
            except BaseException as error:  # noqa: BLE001 - handed to the main thread, re-raised
                self.failure = self.failure or error
                self._halt.set()
                return
            self.acks.put((item.message_id, item.rows.num_rows, payload_bytes))

    def close(self, wait: bool) -> None:
        """Let the senders finish what they hold (`wait`) or stop after their current message."""
        if not wait:
            self._halt.set()
        for inbox in self._inboxes:
            while True:
                try:
                    inbox.put(None, timeout=ACK_POLL_S)
                    break
                except queue.Full:
                    if self._halt.is_set():
                        _drain(inbox)
        for thread in self._threads:
            while thread.is_alive():
                thread.join(ACK_POLL_S)
                self._uploader.on_idle()


def _drain(inbox: queue.Queue) -> None:
    try:
        while True:
            inbox.get_nowait()
    except queue.Empty:
        pass


class FileUploader:
    def __init__(self, producer, topic: str, partitions: int,
                 stop: threading.Event, settings: UploadSettings = UploadSettings(),
                 window: UploadWindow | None = None,
                 on_idle: Callable[[], None] = lambda: None) -> None:
        """`producer`: anything with `send_batch(topic, partition, payloads, sequence)` that
        may be called for different partitions from different threads at once
        (`client.partition_producers.PartitionProducers`); it returns the batch's offset
        (UNKNOWN_OFFSET when a retry found it stored but too old to say where). `window`:
        flow control (None: none); `on_idle`: called from the uploading thread while it waits
        for the senders."""
        assert partitions >= 1
        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.stop = stop
        self.settings = settings
        self.window = window
        self.on_idle = on_idle

    def upload(self, reader: CsvSliceReader, messages_acked: int,
               on_ack: AckCallback) -> FileUploadResult:
        """Send every slice from message id `messages_acked` on; calls `on_ack` as the
        acknowledged prefix grows, once per message, in message-id order."""
        result = FileUploadResult(messages=0, rows=0, messages_sent=0, messages_skipped=0,
                                  payload_bytes=0)
        prefix = AckedPrefix(0)
        senders = _Senders(self, min(self.partitions, self.settings.senders_max))
        pacer = UploadPacer(self.settings.rows_per_s_max, time.monotonic)
        finished = False
        messages = 0
        try:
            for message_id, rows in enumerate(reader.slices()):
                self._check(senders, message_id)
                messages = message_id + 1
                if message_id < messages_acked:  # acknowledged before a restart
                    result.messages_skipped += 1
                    self._size_skipped(message_id, rows)
                    self._acked(prefix, message_id, rows.num_rows, result, on_ack)
                else:
                    result.messages_sent += 1
                    self.stop.wait(pacer.delay_s(rows.num_rows))
                    self._check(senders, message_id)
                    senders.put(Slice(message_id, rows),
                                place(message_id, self.partitions).partition)
                self._absorb(senders, prefix, result, on_ack)
            senders.close(wait=True)
            finished = True
            self._check(senders, messages)
            self._absorb(senders, prefix, result, on_ack)
        finally:
            if not finished:
                senders.close(wait=False)
        assert prefix.end == messages, "every message acknowledged"
        result.messages = messages
        return result

    def _size_skipped(self, message_id: int, rows: pa.RecordBatch) -> None:
        """Tell the window a message acknowledged before a restart that it still counts (at or
        above its partition's log start: offset == sequence, upload_window module doc)."""
        if self.window is None:
            return
        placement = place(message_id, self.partitions)
        if self.window.wants_size(placement.partition, placement.sequence):
            payload = encode_rows(rows, self.settings.compression)
            self.window.acked(placement.partition, placement.sequence, len(payload))

    def _check(self, senders: _Senders, message_id: int) -> None:
        if senders.failure is not None:
            raise senders.failure
        if self.stop.is_set():
            raise UploadInterruptedError(f"stopped before {self.topic} message {message_id}")

    def _absorb(self, senders: _Senders, prefix: AckedPrefix, result: FileUploadResult,
                on_ack: AckCallback) -> None:
        """Every acknowledgement the senders reported so far."""
        while True:
            try:
                message_id, rows, payload_bytes = senders.acks.get_nowait()
            except queue.Empty:
                return
            result.payload_bytes += payload_bytes
            self._acked(prefix, message_id, rows, result, on_ack)

    @staticmethod
    def _acked(prefix: AckedPrefix, message_id: int, rows: int, result: FileUploadResult,
               on_ack: AckCallback) -> None:
        for end, grown_rows in prefix.add(message_id, rows):
            result.rows += grown_rows
            on_ack(end, grown_rows)

    def send(self, item: Slice) -> int:
        """Encode one message and send it until the broker holds it (called by a sender
        thread, after the window let its partition produce); its payload's bytes."""
        placement = place(item.message_id, self.partitions)
        payload = encode_rows(item.rows, self.settings.compression)
        if self.window is not None:
            self.window.wait_for_room(placement.partition, self.stop)

        def send_once() -> int:
            try:
                return self.producer.send_batch(self.topic, placement.partition, [payload],
                                                sequence=placement.sequence)
            except DuplicateSequenceError:
                log.debug("%s message %d was already stored", self.topic, item.message_id)
                return UNKNOWN_OFFSET

        offset = persist(send_once, f"{self.topic} message {item.message_id}", self.stop,
                         self.settings.stall_timeout_s)
        if self.window is not None:
            self.window.acked(placement.partition, _record_offset(offset, placement),
                              len(payload))
        return len(payload)


def _record_offset(answered: int, placement: Placement) -> int:
    """The offset the broker answered; without one, the sequence (upload_window module doc)."""
    return placement.sequence if answered == UNKNOWN_OFFSET else answered
