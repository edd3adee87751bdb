"""PeriodicThread: a daemon thread that calls `tick()` every `interval_s` until it is stopped.

The loop many services wrote by hand (retention, the leader balancer, the commit saver, the
prefix releaser, the probes):

    while not stop.wait(interval_s):
        tick()

so the first tick comes one interval after `start` (or at once with `tick_at_start`: then
`tick(); stop.wait(interval_s)` until stopped), none begins after `stop`, and a tick under way
when `stop` is called finishes first (`stop` joins it).

Exceptions: a tick handles what it expects itself, or names it in `errors`: those are given to
`on_error` (by default a warning naming the thread) and the loop goes on with the next interval.
Anything else ends the thread as in the hand-written loops, so a service's essential thread
that dies of a bug ends the service (common/essential_threads.py matches the thread `name`).

`stop`: the Event that ends the loop, when an owner shares one between several threads (a
node's loops, a query service's stop request); None makes one.

Thread-safety: `start` once; `stop` and `join` from any thread, `stop` more than once, and
from the tick itself (it then only sets the event: a thread cannot join itself).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicThread:
    def __init__(self, name: str, interval_s: float, tick: Callable[[], object], *,
                 stop: threading.Event | None = None, tick_at_start: bool = False,
                 errors: tuple[type[Exception], ...] = (),
                 on_error: Callable[[Exception], None] | None = None) -> None:
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        self._stop = stop if stop is not None else threading.Event()
        self._tick_at_start = tick_at_start
        self._errors = errors
        self._on_error = on_error or self._log_error
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def stopping(self) -> bool:
        """Whether the loop was told to stop (a tick doing several things checks it)."""
        return self._stop.is_set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """End the loop and wait for the thread (at most `timeout_s`; None: until it ends)."""
        self._stop.set()
        self.join(timeout_s)

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the thread to end; nothing when it never started or is the caller."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        if self._tick_at_start:
            while not self._stop.is_set():
                self._tick_once()
                self._stop.wait(self.interval_s)
            return
        while not self._stop.wait(self.interval_s):
            self._tick_once()

    def _tick_once(self) -> None:
        try:
            self._tick()
        except self._errors as exc:
            self._on_error(exc)

    def _log_error(self, exc: Exception) -> None:
        log.warning("%s: tick failed: %s; again in %.3g s", self.name, exc, self.interval_s)
