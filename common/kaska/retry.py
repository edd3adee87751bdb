"""Retry policy of the clients: bounded attempts, exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from common.backoff import Backoff


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The default rides out a broker failover (an election takes 0.5-1.5 s, a restarted
    broker a few more): 60 retries with back-off capped at 0.25 s keep trying for roughly
    7-15 s. The cap is low so that a client notices a new leader within ~0.2 s of its
    election (Kafka's producer retries every 100 ms); a cap of 1 s left a client asleep for
    up to a second after the cluster could serve again."""

    retries_max: int = 60
    backoff_s_initial: float = 0.05
    backoff_s_max: float = 0.25

    def backoff_s(self, attempt: int) -> float:
        """Pause before retry number `attempt` (0-based); jitter spreads clients apart."""
        ceiling = Backoff(self.backoff_s_initial, self.backoff_s_max).delay_s(attempt)
        return ceiling * random.uniform(0.5, 1.0)
