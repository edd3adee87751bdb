"""FollowerProgress: the leader's watch on followers that fetch but do not advance.

A follower that keeps fetching from the same journal end while the leader holds entries past it
is stalled: its group runs one fault from unavailable, while its fetches still keep the leader's
lease and check quorum alive, so nothing else shows it. The leader notes every answered fetch
(`observe`); once a follower has stayed at one `fetch_end`, behind the leader's end, for
`stall_after_s`, the episode is reported once (the caller counts and logs it), and the episode
ends when the follower's `fetch_end` moves or it catches up.

Pure bookkeeping with the clock passed in; `observe` returns whether a new episode starts.

Thread-safety: the leader's request threads (one per follower connection) call `observe`; a
lock guards the table, since two connections of one follower may overlap while one is replaced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

STALL_AFTER_S_DEFAULT = 5.0


@dataclass(slots=True)
class _Watch:
    fetch_end: int
    since_s: float
    reported: bool = False


class FollowerProgress:
    def __init__(self, stall_after_s: float = STALL_AFTER_S_DEFAULT) -> None:
        assert stall_after_s > 0, "a stall needs a positive duration"
        self.stall_after_s = stall_after_s
        self._watches: dict[int, _Watch] = {}
        self._lock = threading.Lock()

    def observe(self, follower: int, fetch_end: int, leader_end: int, now_s: float) -> bool:
        """A fetch of `follower` at `fetch_end` answered while the leader's journal ends at
        `leader_end`. True exactly once per stall episode: when it has been stuck long enough."""
        with self._lock:
            watch = self._watches.get(follower)
            if fetch_end >= leader_end:
                self._watches.pop(follower, None)  # caught up: nothing to watch
                return False
            if watch is None or watch.fetch_end != fetch_end:
                self._watches[follower] = _Watch(fetch_end, now_s)
                return False
            if watch.reported or now_s - watch.since_s < self.stall_after_s:
                return False
            watch.reported = True
            return True

    def stalled(self) -> dict[int, int]:
        """follower -> the journal end it is stuck at, for the followers reported stalled."""
        with self._lock:
            return {follower: watch.fetch_end for follower, watch in self._watches.items()
                    if watch.reported}
