"""Riding out broker restarts: retry a call for as long as the broker may come back (the
client's uploads and result reads, the query service's start).

The Kaska client library already retries a retriable error a few times with backoff (about 3 s
in all); a broker SIGKILLed and restarted by a health checker can be away for longer (the
checker notices after `heartbeat_timeout_s`, then the broker recovers its logs). `persist`
calls again after a retriable `KaskaError` until the call succeeds, the error is not retriable
(`BrokerRefusedError`), `stall_timeout_s` passed since the first failure (`BrokerStalledError`),
or the stop event is set (`StoppedWhileWaitingError`).

Only for idempotent calls: a produce with an explicit sequence, a topic creation whose
"already exists" the caller accepts, any read. Thread-safety: stateless.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from common.backoff import Backoff
from common.kaska.errors import KaskaError

log = logging.getLogger(__name__)

T = TypeVar("T")
STALL_TIMEOUT_S_DEFAULT = 120.0
PAUSE_S_INITIAL = 0.2
PAUSE_S_MAX = 2.0
BACKOFF = Backoff(initial_s=PAUSE_S_INITIAL, max_s=PAUSE_S_MAX)


class BrokerWaitError(Exception):
    """Base of the errors of `persist`."""


class BrokerStalledError(BrokerWaitError):
    """Retriable failures went on for longer than `stall_timeout_s`."""


class BrokerRefusedError(BrokerWaitError):
    """The broker answered with a non-retriable error."""


class StoppedWhileWaitingError(BrokerWaitError):
    """The stop event was set while waiting for the broker."""


def persist(call: Callable[[], T], what: str, stop: threading.Event,
            stall_timeout_s: float = STALL_TIMEOUT_S_DEFAULT,
            clock: Callable[[], float] = time.monotonic, backoff: Backoff = BACKOFF) -> T:
    """`call()`, retried through retriable Kaska errors (rules: module doc), pausing by
    `backoff`; `stall_timeout_s` may be infinite (until stopped)."""
    first_failure_at: float | None = None
    pauses_s = backoff.delays_s()
    while True:
        try:
            return call()
        except KaskaError as error:
            if not error.retriable:
                raise BrokerRefusedError(f"{what}: {type(error).__name__}: {error}") from error
            now = clock()
            first_failure_at = now if first_failure_at is None else first_failure_at
            if now - first_failure_at > stall_timeout_s:
                raise BrokerStalledError(
                    f"{what}: broker unavailable for {stall_timeout_s:g} s: {error}") from error
            pause_s = next(pauses_s)
            log.warning("%s: broker unavailable (%s: %s); retrying in %.1f s", what,
                        type(error).__name__, error, pause_s)
            if stop.wait(pause_s):
                raise StoppedWhileWaitingError(f"{what}: stopped") from error
