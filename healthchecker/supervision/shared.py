"""The supervision state one checker shares with its peers, and its JSON rows.

Owns: `SharedRecord` (one service as a peer sees it: times as ages, so the nodes' clocks need
not agree), its bounds and the compact JSON codec (`shared_to_json`, `shared_from_json`).

Invariants: at most `SHARED_SERVICES_MAX` rows a message (a bounded packet); ages lie in
[0, `SHARED_AGE_S_MAX`], counts in [0, `SHARED_COUNT_MAX`], names hold 1..`NAME_CHARS_MAX`
characters; anything else from a peer raises `SharedStateError` and is not merged.

Threads: none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from healthchecker.supervision.config import NAME_CHARS_MAX
from healthchecker.supervision.records import Phase

SHARED_SERVICES_MAX = 48  # entries in one state message (bounded packet)
SHARED_AGE_S_MAX = 1e7  # ~115 days: ages above this are malformed
SHARED_COUNT_MAX = 10**9


class SharedStateError(ValueError):
    """A shared supervision state (from a peer) that does not parse or breaks its bounds."""



@dataclass(frozen=True, slots=True)
class SharedRecord:
    name: str
    phase: Phase
    since_age_s: float
    last_seen_age_s: float | None
    restart_count: int
    flaps: int
    start_misses: int
    last_restart_age_s: float | None
    backoff_left_s: float  # until the next restart is allowed (0: now)
    in_flight: bool = False  # STARTING: the restart was decided, not yet confirmed done


def shared_to_json(entries: Iterable[SharedRecord]) -> list[list]:
    """Compact rows: [name, phase, since_age, seen_age, restarts, flaps, misses, restart_age,
    backoff_left, in_flight (0/1)]; ages in seconds rounded to milliseconds."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return [
        [e.name, str(e.phase), ms(e.since_age_s), ms(e.last_seen_age_s), e.restart_count,
         e.flaps, e.start_misses, ms(e.last_restart_age_s), ms(e.backoff_left_s),
         int(e.in_flight)]
        for e in entries
    ]


def shared_from_json(rows: object) -> tuple[SharedRecord, ...]:
    """The inverse of `shared_to_json`; raises `SharedStateError` on anything out of bounds."""
    if not isinstance(rows, list) or len(rows) > SHARED_SERVICES_MAX:
        raise SharedStateError(f"expected a list of at most {SHARED_SERVICES_MAX} rows")
    return tuple(_shared_row(row) for row in rows)


def _shared_row(row: object) -> SharedRecord:
    if not isinstance(row, list) or len(row) != 10:
        raise SharedStateError(f"bad row {row!r:.80}")
    name, phase, since, seen, restarts, flaps, misses, restart, backoff, in_flight = row
    if in_flight not in (0, 1) or isinstance(in_flight, bool):
        raise SharedStateError(f"bad in_flight {in_flight!r:.40}")
    if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
        raise SharedStateError(f"bad service name {name!r:.80}")
    try:
        phase = Phase(phase)
    except ValueError as error:
        raise SharedStateError(f"bad phase {phase!r:.40}") from error
    for value in (since, backoff):
        _check_age(value)
    for value in (seen, restart):
        if value is not None:
            _check_age(value)
    for value in (restarts, flaps, misses):
        if isinstance(value, bool) or not isinstance(value, int) or not (
            0 <= value <= SHARED_COUNT_MAX
        ):
            raise SharedStateError(f"bad count {value!r:.40}")
    if phase is Phase.UP and seen is None:
        # The table's invariant (an UP record has been seen): adopted, such a row would fail
        # the next tick's expiry of UP records.
        raise SharedStateError(f"an up row with no last-seen age: {name!r:.80}")
    return SharedRecord(name, phase, float(since), _float_or_none(seen), restarts, flaps, misses,
                        _float_or_none(restart), float(backoff), bool(in_flight))


def _check_age(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        0 <= value <= SHARED_AGE_S_MAX
    ):
        raise SharedStateError(f"bad age {value!r:.40}")


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)
