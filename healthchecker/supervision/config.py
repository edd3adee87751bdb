"""Supervision settings: the timeouts, start deadlines and back-off every checker runs with.

Owns: `SupervisionConfig` (validated on construction: a bad value raises
`SupervisionConfigError`, which the command line turns into exit 2), the built-in start deadlines
of the slow kinds (JVMs), and the restart back-off rule `backoff_s`.

Invariants: every duration is positive and finite; backoff_base_s <= backoff_max_s; a start
deadline grows at most `start_deadline_growth_max` times (1..64); a service name holds
1..`NAME_CHARS_MAX` characters.

Threads: none; the config is immutable.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from common.backoff import Backoff
from healthchecker.errors import HealthCheckerConfigError, require_positive_s

DEFAULT_START_DEADLINES: tuple[tuple[str, float], ...] = (
    ("spark-*", 60.0),  # JVMs: seconds to open a port on two busy cores
    ("query-service*", 60.0),  # a Python driver that starts a JVM
)
NAME_CHARS_MAX = 128


class SupervisionConfigError(HealthCheckerConfigError):
    """A supervision setting out of range or inconsistent."""



@dataclass(frozen=True, slots=True)
class SupervisionConfig:
    self_name: str  # never supervise ourselves: we are obviously running
    heartbeat_timeout_s: float = 3.0
    start_deadline_s: float = 10.0  # services that match no pattern of `start_deadlines`
    start_deadlines: tuple[tuple[str, float], ...] = DEFAULT_START_DEADLINES  # first match
    start_deadline_growth_max: float = 4.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    stable_after_s: float = 10.0  # a service that ran this long was not crash-looping
    stall_gap_s: float = 1.0
    # None: a service silent past heartbeat_timeout_s is dead. Set: the leader first asks the
    # restarter whether its process is frozen (dead at once) or runs (slow under load: dead
    # only once silent this long), so a busy machine does not restart-storm slow JVMs.
    hung_timeout_s: float | None = None

    def __post_init__(self) -> None:
        error = SupervisionConfigError
        if not isinstance(self.self_name, str) or not 0 < len(self.self_name) <= NAME_CHARS_MAX:
            raise error(f"self_name must hold 1..{NAME_CHARS_MAX} characters")
        for name in ("heartbeat_timeout_s", "start_deadline_s", "backoff_base_s",
                     "backoff_max_s", "stable_after_s", "stall_gap_s"):
            require_positive_s(error, name, getattr(self, name))
        if self.hung_timeout_s is not None:
            require_positive_s(error, "hung_timeout_s", self.hung_timeout_s)
            if self.hung_timeout_s < self.heartbeat_timeout_s:
                raise error(f"hung_timeout_s ({self.hung_timeout_s:g}) must not be below "
                            f"heartbeat_timeout_s ({self.heartbeat_timeout_s:g})")
        if self.backoff_base_s > self.backoff_max_s:
            raise error(f"backoff_base_s ({self.backoff_base_s:g}) must not exceed "
                        f"backoff_max_s ({self.backoff_max_s:g})")
        if not (isinstance(self.start_deadline_growth_max, int | float)
                and 1 <= self.start_deadline_growth_max <= 64):
            raise error(f"start_deadline_growth_max must be within 1..64, got "
                        f"{self.start_deadline_growth_max!r}")
        for pattern, seconds in self.start_deadlines:
            if not isinstance(pattern, str) or not pattern:
                raise error(f"a start deadline needs a service name pattern, got {pattern!r}")
            require_positive_s(error, f"start deadline of {pattern!r}", seconds)

    def start_deadline_for(self, name: str, misses: int = 0) -> float:
        """The start deadline of `name`'s kind, doubled per missed deadline (capped)."""
        base_s = next(
            (seconds for pattern, seconds in self.start_deadlines if fnmatchcase(name, pattern)),
            self.start_deadline_s,
        )
        return base_s * min(2.0 ** min(misses, 16), self.start_deadline_growth_max)


def backoff_s(config: SupervisionConfig, flaps: int) -> float:
    """The pause after the restart that follows `flaps` consecutive flaps (0: none)."""
    if flaps <= 0:
        return 0.0
    return Backoff(config.backoff_base_s, config.backoff_max_s).delay_s(flaps - 1)
