"""What goes into the supervision (events) and what comes out of it (actions).

Owns: the event types (`Tick`, `Seen`, `Departed`, `Lost`, `Expected`, `Leadership`,
`RestartDone`, `PeerState`, `Inspected`), the action types (`Restart`, `Inspect`, `Transition`,
`ShareState`, `Stalled`) and `transition`, the one way a phase change becomes an action.

Invariants: events and actions are immutable values; a `Transition` is emitted only when the
phase really changes.

Threads: none.
"""

from __future__ import annotations

from dataclasses import dataclass

from healthchecker.supervision.records import NEVER, Phase, ServiceRecord
from healthchecker.supervision.shared import SharedRecord


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class Seen:
    """A heartbeat from `instance`, or (instance "") an answered probe."""

    name: str
    instance: str = ""


@dataclass(frozen=True, slots=True)
class Departed:
    name: str
    instance: str = ""


@dataclass(frozen=True, slots=True)
class Lost:
    """Evidence that the process is gone: its heartbeat connection closed without a goodbye."""

    name: str
    instance: str = ""
    reason: str = "heartbeat connection closed without a goodbye"


@dataclass(frozen=True, slots=True)
class Expected:
    """The services the restarter says should run (refreshed now and then), and those of
    them it knows are not running (`stopped`: exited container, no live pid), as listed from
    `observed_at` on (the caller's clock, taken before the listing began)."""

    names: frozenset[str]
    stopped: frozenset[str] = frozenset()
    observed_at: float = NEVER


@dataclass(frozen=True, slots=True)
class Leadership:
    is_leader: bool


@dataclass(frozen=True, slots=True)
class RestartDone:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PeerState:
    sender: int
    entries: tuple[SharedRecord, ...]


@dataclass(frozen=True, slots=True)
class Inspected:
    """What the restarter found of a silent service's process: frozen (SIGSTOPped, paused),
    running (merely slow), or None when it cannot tell (or nothing runs). `silent_since` is the
    `Inspect`'s: an answer about an older silence is stale."""

    name: str
    silent_since: float
    frozen: bool | None
    detail: str = ""


Event = (Tick | Seen | Departed | Lost | Expected | Leadership | RestartDone | PeerState
         | Inspected)


# --- actions ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Restart:
    name: str
    cause: str
    attempt: int  # 1 for the first restart of this service
    backoff_s: float  # how long after this restart the next one may come at the earliest


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    previous: Phase | None
    phase: Phase
    reason: str


@dataclass(frozen=True, slots=True)
class ShareState:
    """Send the state to the peers now (a restart was decided)."""


@dataclass(frozen=True, slots=True)
class Stalled:
    gap_s: float


@dataclass(frozen=True, slots=True)
class Inspect:
    """Ask the restarter whether `name`'s silent process is frozen or merely slow; the answer
    comes back as `Inspected(name, silent_since, ...)`."""

    name: str
    silent_since: float  # the record's last_seen_at when the silence began


Action = Restart | Inspect | Transition | ShareState | Stalled


def transition(name: str, old: ServiceRecord | None, new: ServiceRecord, reason: str):
    """[Transition] when `new` changes the phase of `old` (None: first record), else []."""
    previous = None if old is None else old.phase
    return [] if previous is new.phase else [Transition(name, previous, new.phase, reason)]
