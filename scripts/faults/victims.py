"""Who a chaos loop hits next (scripts/faults/chaos.py): service kinds, and the victim pickers.

A service's kind is its name without a trailing `-<number>` (`broker-2` -> `broker`,
`spark-worker-1` -> `spark-worker`, `query-service` and `status` stay). The health checker that
every other checker names as leader when it is hit is of kind `healthchecker-leader`: losing the
leader is a different fault (an election, then a successor that must heal it) from losing a
follower.

Pickers (`choose(candidates, leader, rng) -> name or None`, then `hit(name, leader)` once the
fault took):

    AnyVictim        uniform over the running candidates (the classic chaos loop)
    RoundRobinKinds  the kinds in turn (KIND_ORDER: the client and the leader first, so that even
                     a short run hits them), a random member of the kind. Precisely: the kind hit
                     least so far among those with a running member, ties broken by KIND_ORDER;
                     so a kind whose fault failed (the service died on its own meanwhile, the
                     engine refused) or that had nobody running (no agreed leader during an
                     election) keeps its turn. N faults give every present kind N/kinds hits
                     (within one), which is what per-kind heal figures need.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Protocol

LEADER_KIND = "healthchecker-leader"
# Client and leader first: a round that ends early has hit them anyway.
KIND_ORDER = ("client", LEADER_KIND, "broker", "query-service", "spark-worker", "spark-master",
              "healthchecker", "status")
_NUMBER_SUFFIX = re.compile(r"-\d+$")


class VictimConfigError(ValueError):
    """A picker configured with an unusable kind order."""


def service_kind(name: str) -> str:
    """`broker-2` -> `broker`, `spark-worker-1` -> `spark-worker`, `query-service` unchanged."""
    return _NUMBER_SUFFIX.sub("", name)


def fault_kind(name: str, leader: str | None) -> str:
    """The kind of a fault on `name` when `leader` leads the health checkers."""
    return LEADER_KIND if leader is not None and name == leader else service_kind(name)


class VictimPicker(Protocol):
    def choose(self, candidates: Sequence[str], leader: str | None,
               rng: random.Random) -> str | None:
        """One of `candidates` (running, not excluded), or None to hit nothing this turn."""

    def hit(self, name: str, leader: str | None) -> None:
        """The fault on `name` (chosen while `leader` led) took."""


class AnyVictim:
    """Uniform over the candidates."""

    def choose(self, candidates: Sequence[str], leader: str | None,
               rng: random.Random) -> str | None:
        return rng.choice(list(candidates)) if candidates else None

    def hit(self, name: str, leader: str | None) -> None:
        """Nothing to remember."""


class RoundRobinKinds:
    """The kinds of `order` in turn, a random running member each (module doc). Candidates of
    no listed kind (a service this list does not know) are hit only when no listed kind has a
    member, so they are never starved but never crowd out the listed ones."""

    def __init__(self, order: Sequence[str] = KIND_ORDER) -> None:
        if not order or len(set(order)) != len(order):
            raise VictimConfigError(f"the kind order must list distinct kinds, got {list(order)}")
        self.order = tuple(order)
        self.hits = dict.fromkeys(self.order, 0)

    def choose(self, candidates: Sequence[str], leader: str | None,
               rng: random.Random) -> str | None:
        by_kind: dict[str, list[str]] = {}
        for name in candidates:
            by_kind.setdefault(fault_kind(name, leader), []).append(name)
        present = [kind for kind in self.order if kind in by_kind]
        if present:
            kind = min(present, key=lambda k: (self.hits[k], self.order.index(k)))
            return rng.choice(sorted(by_kind[kind]))
        others = sorted(name for kind, names in by_kind.items() if kind not in self.order
                        for name in names)
        return rng.choice(others) if others else None

    def hit(self, name: str, leader: str | None) -> None:
        kind = fault_kind(name, leader)
        if kind in self.hits:
            self.hits[kind] += 1


PICKERS = {"random": AnyVictim, "round-robin": RoundRobinKinds}
