"""A Kafka connection's answers, sent in request order by their own thread.

Kafka clients pair answers with requests by order (kafka-python insists on it), yet a Produce
with acks=-1 is ready only once a majority holds its batches. So the connection thread reads and
handles requests one after another and queues each answer here -- ready bytes, or a `Deferred`
that waits for its acks -- and this queue's thread sends them strictly in that order. A
producer with several requests in flight (librdkafka: up to 5 with idempotence) thus keeps the
leader appending while earlier batches replicate, as Kaska's own listener does.

Bounds: at most `pending_max` answers queued; `put` then waits (back-pressure on the reader),
each wait bounded by the ack timeout of the answer ahead. A send that fails (the client left or
the socket timed out) marks the connection broken: every answer still queued is dropped and
counted in one log line -- the client, gone, retries them elsewhere (its idempotence dedups).

Thread-safety: `put` and `close` from the connection thread; `_run` on the queue's own thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Deferred:
    """An answer frame that `wait()` returns (or None: no answer) once it is ready; `wait()` is
    bounded (the replica manager's ack timeout) and never raises."""

    wait: Callable[[], bytes | None]


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """What a handler returns when its response is ready only later: `wait()` returns it
    (bounded; may raise a KaskaError like a handler)."""

    wait: Callable[[], object]


@dataclass(frozen=True, slots=True)
class PartlyRefused:
    """What a handler returns (or a DeferredResponse's wait returns) when it answers but refused
    part of the request -- a Produce partition whose records were refused: the request is
    counted under `outcome` (the refusal's error class) rather than ok. `response` may be None
    (acks=0: no answer)."""

    response: object
    outcome: str


_END = object()


class OrderedAnswers:
    def __init__(self, send: Callable[[bytes], None], pending_max: int, peer: str) -> None:
        assert pending_max >= 1
        self._send = send
        self._peer = peer
        self._queue: queue.Queue = queue.Queue(maxsize=pending_max)
        self._broken = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kafka-answers-{peer}")
        self._thread.start()

    @property
    def broken(self) -> bool:
        return self._broken

    def put(self, answer: bytes | Deferred) -> None:
        self._queue.put(answer)

    def close(self, timeout_s: float) -> bool:
        """No more answers: send what is queued, then stop; False if that outlived timeout_s."""
        self._queue.put(_END)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        dropped = 0
        while True:
            item = self._queue.get()
            if item is _END:
                break
            if self._broken:
                dropped += 1
                continue
            frame = item.wait() if isinstance(item, Deferred) else item
            if frame is None:
                continue
            try:
                self._send(frame)
            except OSError as exc:
                self._broken = True
                dropped += 1
                log.info("kafka connection %s broke while answering: %r", self._peer, exc)
        if dropped:
            log.warning("kafka connection %s: %d answers not delivered (the client left)",
                        self._peer, dropped)
