"""Supervision checkpoints: the restart bookkeeping that survives a checker's restart.

Owns: `to_checkpoint` / `from_checkpoint` (JSON; format 2, format 1 still read) and
`SupervisorCheckpointError`.

Invariants: only services restarted at least once are kept; monotonic times are stored as
wall-clock times and come back relative to the new process's clock; restored services start
UNKNOWN (nobody has seen them yet in this life).

Threads: none; the caller reads and writes the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from healthchecker.supervision.records import NEVER, Phase, ServiceRecord, SupervisionState

CHECKPOINT_FORMAT = 2


class SupervisorCheckpointError(ValueError):
    """A supervision checkpoint whose format or fields do not parse."""



def to_checkpoint(state: SupervisionState, now: float, wall_now: float) -> dict:
    """Restart counts and back-off as JSON; monotonic times become wall-clock times."""

    def wall(at: float | None) -> float | None:
        return None if at is None or not math.isfinite(at) else wall_now - (now - at)

    return {
        "format": CHECKPOINT_FORMAT,
        "services": {
            name: {
                "restart_count": record.restart_count,
                "flaps": record.flaps,
                "start_misses": record.start_misses,
                "last_restart_wall": wall(record.last_restart_at),
                "not_before_wall": wall(record.not_before),
                "last_cause": record.cause,
            }
            for name, record in sorted(state.records.items())
            if record.restart_count > 0
        },
    }


def from_checkpoint(data: Mapping, now: float, wall_now: float) -> dict[str, ServiceRecord]:
    """Records (UNKNOWN since `now`) carrying the restart bookkeeping of `to_checkpoint`; format
    1 (before start deadlines) is read too."""
    if not isinstance(data, Mapping) or data.get("format") not in (1, CHECKPOINT_FORMAT):
        raise SupervisorCheckpointError(f"unknown supervisor checkpoint format in {data!r:.80}")

    def monotonic(at: float | None) -> float | None:
        return None if at is None else now - (wall_now - float(at))

    def not_before(at: float | None) -> float:
        return NEVER if at is None else now - (wall_now - float(at))

    try:
        return {
            str(name): ServiceRecord(
                phase=Phase.UNKNOWN,
                since=now,
                restart_count=int(fields["restart_count"]),
                flaps=int(fields["flaps"]),
                start_misses=int(fields.get("start_misses", 0)),
                last_restart_at=monotonic(fields["last_restart_wall"]),
                not_before=not_before(fields["not_before_wall"]),
                cause=str(fields["last_cause"]),
            )
            for name, fields in data["services"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SupervisorCheckpointError(f"bad supervisor checkpoint: {error!r}") from error
