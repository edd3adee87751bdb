"""Heal accounting: faults + what the platform did afterwards -> one heal record per fault.
Pure functions over plain data (no Docker, no processes), so the rules are tested with fakes.

Evidence (all in epoch seconds on the host's clock):
    Fault     the killer's record: service, KILL or PAUSE, when (just before the signal)
    Start     a new instance of a service began running (a Docker `start` event, a new pid in
              the local registry)
    Sighting  a health checker's first evidence that an instance serves (checker_logs.py): the
              first heartbeat of an instance (its id is known), or, for the probed Spark
              daemons, an answered probe / a phase change to up (no instance id)

Rules:
  * running again: the first Start of the fault's service strictly after the fault.
  * serving again: for a service that heartbeats, the first Sighting after the fault of an
    instance that no checker had seen up to the fault (a heartbeat is proof of a new instance,
    whatever the clock); for a probed service, the first Sighting at or after running again.
    Either is the first one *observed*: when every checker is down at that moment the figure
    is later than the truth, never earlier.
  * healed: running again and serving again both observed.
  * A second fault on a service before its first fault was healed can only hit the same,
    still-running instance (a paused one: a killed service is not running, so the killer
    cannot pick it). One new instance then heals both, and each heal time is counted from its
    own fault: the earlier fault's figure includes the later fault, so a double fault never
    makes a heal look faster. `shared` counts such later faults.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scripts.faults.chaos import ACTION_KILL, ACTION_PAUSE, Fault
from scripts.faults.checker_logs import Sighting
from scripts.faults.victims import LEADER_KIND, service_kind

__all__ = ["Heal", "HealStats", "Sighting", "Start", "heal_records", "heal_stats", "kind_of"]


@dataclass(frozen=True)
class Start:
    at: float
    service: str


@dataclass(frozen=True)
class Heal:
    fault: Fault
    running_at: float | None
    serving_at: float | None
    shared: int = 0  # later faults on the same instance healed by the same start

    @property
    def running_s(self) -> float | None:
        return None if self.running_at is None else self.running_at - self.fault.wall_at

    @property
    def serving_s(self) -> float | None:
        return None if self.serving_at is None else self.serving_at - self.fault.wall_at

    @property
    def healed(self) -> bool:
        return self.running_at is not None and self.serving_at is not None

    @property
    def kind(self) -> str:
        return kind_of(self.fault)


def kind_of(fault: Fault) -> str:
    """The fault's service kind, the health-checker leader apart (scripts/faults/victims.py)."""
    return LEADER_KIND if fault.leader else service_kind(fault.name)


def heal_records(faults: Iterable[Fault], starts: Iterable[Start],
                 sightings: Iterable[Sighting]) -> list[Heal]:
    """One Heal per fault, in fault order (module doc for the rules)."""
    ordered = sorted(faults, key=lambda fault: fault.wall_at)
    starts_of: dict[str, list[float]] = {}
    for start in starts:
        starts_of.setdefault(start.service, []).append(start.at)
    sightings_of: dict[str, list[Sighting]] = {}
    for sighting in sightings:
        sightings_of.setdefault(sighting.service, []).append(sighting)
    heals = []
    for fault in ordered:
        running_at = _first_after(starts_of.get(fault.name, []), fault.wall_at)
        serving_at = _serving_at(fault, running_at, sightings_of.get(fault.name, []))
        until = float("inf") if running_at is None else running_at
        shared = sum(1 for other in ordered if other.name == fault.name
                     and fault.wall_at < other.wall_at < until)
        heals.append(Heal(fault, running_at, serving_at, shared))
    return heals


def _first_after(times: Iterable[float], after: float) -> float | None:
    later = [at for at in times if at > after]
    return min(later) if later else None


def _serving_at(fault: Fault, running_at: float | None,
                sightings: Sequence[Sighting]) -> float | None:
    heartbeats = [s for s in sightings if s.instance]
    if heartbeats:
        known = {s.instance for s in heartbeats if s.at <= fault.wall_at}
        return _first_after((s.at for s in heartbeats if s.instance not in known),
                            fault.wall_at)
    if running_at is None:
        return None
    answered = [s.at for s in sightings if s.at >= running_at]
    return min(answered) if answered else None


@dataclass(frozen=True)
class HealStats:
    faults: int
    kills: int
    pauses: int
    unhealed: int
    running_median_s: float | None
    running_max_s: float | None
    serving_median_s: float | None
    serving_max_s: float | None


def heal_stats(heals: Sequence[Heal]) -> HealStats:
    """Counts, and median and max of the heal times of the healed faults."""
    running = [h.running_s for h in heals if h.healed]
    serving = [h.serving_s for h in heals if h.healed]
    return HealStats(
        faults=len(heals),
        kills=sum(h.fault.action == ACTION_KILL for h in heals),
        pauses=sum(h.fault.action == ACTION_PAUSE for h in heals),
        unhealed=sum(not h.healed for h in heals),
        running_median_s=statistics.median(running) if running else None,
        running_max_s=max(running) if running else None,
        serving_median_s=statistics.median(serving) if serving else None,
        serving_max_s=max(serving) if serving else None,
    )
