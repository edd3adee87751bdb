"""The timeline of the last events: what the health checkers journaled (deaths detected,
restarts decided and carried out, heals, election roles; healthchecker/journal.py) and what
the status service itself saw change between two polls (the broker cluster's leader and
epoch, the health checkers' leader).

Every checker detects a death on its own, so one death arrives once per checker: events of the
same kind about the same service from different checkers within `dedup_window_s` of the first
are one event, reported by several. Pure functions of their inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

KIND_BROKER_LEADER = "broker-leader"  # the brokers' leader or epoch changed
KIND_CHECKER_LEADER = "checker-leader"  # the health checkers agree on another leader
OBSERVER = "status"  # reporter of what the status service saw itself


@dataclass(frozen=True)
class TimelineEvent:
    at_s: float  # wall clock, epoch seconds
    kind: str
    service: str
    detail: str
    reporters: tuple[str, ...]

    def to_json(self) -> dict:
        return {"at_s": self.at_s, "kind": self.kind, "service": self.service,
                "detail": self.detail, "reporters": list(self.reporters)}


def checker_events(reporter: str, rows: Iterable[dict]) -> list[TimelineEvent]:
    return [TimelineEvent(float(row["at_s"]), row["kind"], row["service"], row["detail"],
                          (reporter,)) for row in rows]


def merge(events: Iterable[TimelineEvent], dedup_window_s: float,
          events_max: int) -> list[TimelineEvent]:
    """Newest first, at most `events_max`; same kind and service from other reporters within
    the window of an earlier event are folded into it."""
    merged: list[TimelineEvent] = []
    open_by_key: dict[tuple[str, str], int] = {}  # (kind, service) -> index in merged
    for event in sorted(events, key=lambda e: e.at_s):
        key = (event.kind, event.service)
        index = open_by_key.get(key)
        if index is not None and _folds(merged[index], event, dedup_window_s):
            first = merged[index]
            merged[index] = TimelineEvent(first.at_s, first.kind, first.service, first.detail,
                                          first.reporters + event.reporters)
            continue
        open_by_key[key] = len(merged)
        merged.append(event)
    return list(reversed(merged))[:events_max]


def _folds(first: TimelineEvent, event: TimelineEvent, window_s: float) -> bool:
    """A role change is each checker's own; anything else folds once per other reporter."""
    return (event.kind != "role" and event.at_s - first.at_s <= window_s
            and not set(event.reporters) & set(first.reporters))


@dataclass(frozen=True)
class Leaders:
    """Who led at one poll (None: unknown, e.g. nobody answered)."""

    broker_leader: str | None = None
    broker_epoch: int | None = None
    checker_leader: str | None = None


def observed_changes(before: Leaders | None, after: Leaders, at_s: float) -> list[TimelineEvent]:
    """Events for the leaders that changed from one poll to the next (none at the first)."""
    if before is None:
        return []
    events = []
    if after.broker_leader is not None and (
            (after.broker_leader, after.broker_epoch)
            != (before.broker_leader, before.broker_epoch)):
        events.append(TimelineEvent(
            at_s, KIND_BROKER_LEADER, after.broker_leader,
            f"leads the brokers in epoch {after.broker_epoch} (was {before.broker_leader}, "
            f"epoch {before.broker_epoch})", (OBSERVER,)))
    if after.checker_leader is not None and after.checker_leader != before.checker_leader:
        events.append(TimelineEvent(
            at_s, KIND_CHECKER_LEADER, after.checker_leader,
            f"leads the health checkers (was {before.checker_leader})", (OBSERVER,)))
    return events
