"""Retry policy of the clients: bounded attempts, exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from common.backoff import Backoff


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The default rides out a broker failover (an election takes 1-3 s, a restarted broker a
    few more): 20 retries with back-off capped at 1 s keep trying for roughly 8-16 s."""

    retries_max: int = 20
    backoff_s_initial: float = 0.05
    backoff_s_max: float = 1.0

    def backoff_s(self, attempt: int) -> float:
        """Pause before retry number `attempt` (0-based); jitter spreads clients apart."""
        ceiling = Backoff(self.backoff_s_initial, self.backoff_s_max).delay_s(attempt)
        return ceiling * random.uniform(0.5, 1.0)
