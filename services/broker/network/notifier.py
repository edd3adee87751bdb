"""Wakes long-polling fetches when new data becomes visible in a partition.

One condition variable per (topic, partition), created on first use, so a produce wakes only
the fetches waiting on that partition. Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class DataNotifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conditions: dict[tuple[str, int], threading.Condition] = {}
        self._stopping = False

    def _condition(self, topic: str, partition: int) -> threading.Condition:
        key = (topic, partition)
        with self._lock:
            cond = self._conditions.get(key)
            if cond is None:
                cond = self._conditions[key] = threading.Condition()
            return cond

    @property
    def stopping(self) -> bool:
        return self._stopping

    def notify(self, topic: str, partition: int) -> None:
        cond = self._condition(topic, partition)
        with cond:
            cond.notify_all()

    def wait_until(self, topic: str, partition: int, ready: Callable[[], bool],
                   timeout_s: float) -> bool:
        """Block until ready() holds, the timeout passes or the broker stops; ready()'s value."""
        cond = self._condition(topic, partition)
        with cond:
            cond.wait_for(lambda: self._stopping or ready(), timeout_s)
        return ready()

    def forget_topic(self, topic: str) -> None:
        """Wake and drop the waiters of a deleted topic."""
        with self._lock:
            gone = [key for key in self._conditions if key[0] == topic]
            conditions = [self._conditions.pop(key) for key in gone]
        for cond in conditions:
            with cond:
                cond.notify_all()

    def stop(self) -> None:
        self._stopping = True
        with self._lock:
            conditions = list(self._conditions.values())
        for cond in conditions:
            with cond:
                cond.notify_all()
