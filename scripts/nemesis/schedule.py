"""The nemesis's fault schedule: a pure function of a seed and the round's shape.

`plan_faults(plan, seed)` draws faults one after another: the gap before each is uniform in
[0.5, 1.5] x `fault_interval_s`, its kind by `KIND_WEIGHTS`, its length uniform in
[`fault_s_min`, `fault_s_max`]. Invariants of the plan:
- at most `(brokers - 1) // 2` broker faults overlap in time and no broker is the target of
  two at once, so a majority can always make progress (a fault that found no free broker
  at its time is not drawn);
- every broker fault ends (its broker restarted, thawed or reconnected) by `seconds`;
- a pause is followed, with probability `churn_in_pause_p`, by a topic churn half way
  through it: a follower frozen across a delete + re-create is the case that once wedged a
  replica, and a uniform draw would seldom produce it in a short round.
`actions_of(faults)` expands the faults into the timed actions the runner executes (start and
end of each), in time order. The same (plan, seed) always gives the same schedule, so a
failing round replays from the seed it prints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KILL = "kill"  # SIGKILL, restart after the fault's length
PAUSE = "pause"  # SIGSTOP, SIGCONT after it
ISOLATE = "isolate"  # every link to and from one broker cut, healed after it
CUT_LINK = "cut_link"  # both directions between two brokers cut, healed after it
WIPE = "wipe"  # SIGKILL, data directory removed, restart after it
CHURN = "churn"  # a topic deleted and created again
KIND_WEIGHTS = {KILL: 3, PAUSE: 3, ISOLATE: 2, CUT_LINK: 2, WIPE: 1, CHURN: 3}
BROKER_KINDS = (KILL, PAUSE, ISOLATE, CUT_LINK, WIPE)
WARMUP_S = 2.0  # the workload starts before the first fault
GAP_SPREAD = (0.5, 1.5)


@dataclass(frozen=True, slots=True)
class SchedulePlan:
    """The shape of a round: its length, the cluster, the topics churned, the fault pace."""

    seconds: float
    brokers: int
    topics: tuple[str, ...]
    fault_interval_s: float = 3.0
    fault_s_min: float = 1.0
    fault_s_max: float = 6.0
    churn_in_pause_p: float = 0.5

    def __post_init__(self) -> None:
        assert self.brokers >= 3 and self.brokers % 2 == 1, "an odd cluster of 3 or more"
        assert self.topics, "at least one topic"
        assert 0 < self.fault_s_min <= self.fault_s_max and self.fault_interval_s > 0


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: `kind` at `at_s` seconds into the round on `brokers` (a churn: none, and
    its `topic`), undone `length_s` later (a churn: 0)."""

    at_s: float
    kind: str
    brokers: tuple[int, ...] = ()
    length_s: float = 0.0
    topic: str = ""

    @property
    def end_s(self) -> float:
        return self.at_s + self.length_s

    def describe(self) -> str:
        target = self.topic if self.kind == CHURN else ",".join(map(str, self.brokers))
        length = f" for {self.length_s:.2f} s" if self.length_s else ""
        return f"{self.at_s:8.2f} s  {self.kind:<8} {target}{length}"


@dataclass(frozen=True, slots=True)
class Action:
    """What the runner does at `at_s`: `verb` ("kill", "restart", "pause", "resume", "cut",
    "heal", "wipe", "churn") on `brokers` (a cut or heal: the ordered links between them)."""

    at_s: float
    verb: str
    brokers: tuple[int, ...] = ()
    topic: str = ""


def plan_faults(plan: SchedulePlan, seed: int) -> list[Fault]:
    """The round's faults in time order (see the module docstring)."""
    rng = random.Random(seed)
    overlap_max = (plan.brokers - 1) // 2
    kinds = list(KIND_WEIGHTS)
    weights = [KIND_WEIGHTS[kind] for kind in kinds]
    faults: list[Fault] = []
    at_s = WARMUP_S
    while True:
        at_s += plan.fault_interval_s * rng.uniform(*GAP_SPREAD)
        if at_s >= plan.seconds:
            return sorted(faults, key=lambda fault: fault.at_s)
        kind = rng.choices(kinds, weights)[0]
        if kind == CHURN:
            faults.append(Fault(at_s, CHURN, topic=rng.choice(plan.topics)))
            continue
        length_s = min(rng.uniform(plan.fault_s_min, plan.fault_s_max), plan.seconds - at_s)
        busy = [f for f in faults if f.kind in BROKER_KINDS and f.at_s < at_s + length_s
                and at_s < f.end_s]
        free = [b for b in range(1, plan.brokers + 1)
                if all(b not in f.brokers for f in busy)]
        needed = 2 if kind == CUT_LINK else 1
        if len(busy) >= overlap_max or len(free) < needed:
            continue
        targets = tuple(sorted(rng.sample(free, needed)))
        faults.append(Fault(at_s, kind, targets, length_s))
        if kind == PAUSE and rng.random() < plan.churn_in_pause_p:
            faults.append(Fault(at_s + length_s / 2, CHURN, topic=rng.choice(plan.topics)))


def actions_of(faults: list[Fault]) -> list[Action]:
    """Each fault's start and end as timed actions, in time order (ends first at a tie, so
    a broker is back before the next fault on it)."""
    starts = {KILL: "kill", PAUSE: "pause", ISOLATE: "cut", CUT_LINK: "cut", WIPE: "wipe"}
    ends = {KILL: "restart", PAUSE: "resume", ISOLATE: "heal", CUT_LINK: "heal",
            WIPE: "restart"}
    timed: list[tuple[float, int, Action]] = []
    for fault in faults:
        if fault.kind == CHURN:
            timed.append((fault.at_s, 1, Action(fault.at_s, "churn", topic=fault.topic)))
            continue
        timed.append((fault.at_s, 1, Action(fault.at_s, starts[fault.kind], fault.brokers)))
        timed.append((fault.end_s, 0, Action(fault.end_s, ends[fault.kind], fault.brokers)))
    return [action for _at, _order, action in sorted(timed, key=lambda item: item[:2])]


def describe(faults: list[Fault]) -> str:
    """The schedule, one fault a line (printed with every failure, so it replays)."""
    return "\n".join(fault.describe() for fault in faults) or "(no faults)"


def count_by_kind(faults: list[Fault]) -> dict[str, int]:
    counts = dict.fromkeys(KIND_WEIGHTS, 0)
    for fault in faults:
        counts[fault.kind] += 1
    return counts
