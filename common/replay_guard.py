"""Replay protection for signed frames: per sender, its newest incarnation and a window of counters.

Every signed frame of the platform (the health checkers' election packets, the brokers' peer
frames, services' heartbeats) carries, inside its MAC, the sender's id, its incarnation (a
number that grows across the sender's restarts: its start time in nanoseconds) and a counter
that grows with every frame it sends. The receiver keeps per sender the newest incarnation and
a `window`-frame bitmap of the counters seen below the highest one (as IPsec does): a frame
whose counter was already seen, is older than the window, or comes from an older incarnation
is a replay. An older incarnation is accepted again only after the newer one has been silent
for `incarnation_expiry_s` (a sender whose clock went back across a restart is not locked out
for good).

A receiver that has not heard from a sender yet (it just started) has no counters to compare:
there the sender's wall clock, also inside the MAC, bounds the damage (`is_stale`): a frame more
than `age_s_max` away from the receiver's wall clock is refused, so only a frame recorded
moments ago can be replayed, once.

Not thread-safe: the owner serialises calls (the election loop; a lock in the broker's gate).
"""

from __future__ import annotations

REPLAY_WINDOW = 64
INCARNATION_EXPIRY_S_DEFAULT = 30.0
FRAME_AGE_S_MAX_DEFAULT = 30.0


def is_stale(sent_at_ms: int, now_s: float, age_s_max: float = FRAME_AGE_S_MAX_DEFAULT) -> bool:
    """True when a frame stamped `sent_at_ms` (sender's wall clock) is too old or too far ahead
    of the receiver's wall clock `now_s`."""
    return abs(now_s - sent_at_ms / 1000) > age_s_max


class ReplayGuard:
    """Per sender: the newest incarnation, the highest counter and a window of seen counters."""

    def __init__(
        self, window: int = REPLAY_WINDOW,
        incarnation_expiry_s: float = INCARNATION_EXPIRY_S_DEFAULT,
        senders_max: int = 1024,
    ) -> None:
        assert window >= 1 and incarnation_expiry_s > 0 and senders_max >= 1
        self.window = window
        self.incarnation_expiry_s = incarnation_expiry_s
        # Senders are authenticated before they reach the guard, so their number is the
        # deployment's; the bound only keeps a bug from growing the table for ever.
        self.senders_max = senders_max
        # sender -> (incarnation, highest counter, bitmap of seen counters below it, heard at)
        self._senders: dict[object, tuple[int, int, int, float]] = {}

    def admit(self, sender: object, incarnation: int, counter: int, now: float) -> bool:
        """True (and remembered) for a fresh frame; False for a replay. `now`: monotonic s."""
        known = self._senders.get(sender)
        if known is None or incarnation > known[0] or (
            incarnation < known[0] and now - known[3] >= self.incarnation_expiry_s
        ):
            if known is None and len(self._senders) >= self.senders_max:
                self._forget_oldest()
            self._senders[sender] = (incarnation, counter, 1, now)
            return True
        known_incarnation, highest, seen, _heard_at = known
        if incarnation != known_incarnation:
            return False
        if counter > highest:
            shift = counter - highest
            seen = ((seen << shift) | 1) & ((1 << self.window) - 1) if shift < self.window else 1
            self._senders[sender] = (incarnation, counter, seen, now)
            return True
        offset = highest - counter
        if offset >= self.window or seen >> offset & 1:
            return False
        self._senders[sender] = (incarnation, highest, seen | 1 << offset, now)
        return True

    def _forget_oldest(self) -> None:
        oldest = min(self._senders, key=lambda sender: self._senders[sender][3])
        del self._senders[oldest]
