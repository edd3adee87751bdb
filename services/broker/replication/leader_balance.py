"""LeaderBalancer: a leader that is not its group's preferred leader hands the group over to it
once that broker has kept up steadily for a while (Kafka's `auto.leader.rebalance`; docs/
replication.md, "Leadership spread over the brokers").

Elections pick whoever times out first, so after a start or a failover one broker may lead
several groups. Each group has a preferred leader (placement.py: spread evenly over the
brokers); a returning broker gets its groups back this way, through the leadership transfer
every broker already does on SIGTERM (raft.py): the leader stops taking writes, the target
catches up and stands at once, so the group is without a leader for a round trip, not an
election timeout.

The rule (`BalanceRule.step`, pure): a leader hands over when the preferred broker is a voter,
is at most `lag_entries_max` journal entries behind, and has fetched within `fetch_fresh_s` --
continuously for `steady_s` (the hysteresis: a broker that flaps, or is still catching up after
a restart, keeps nothing from the others). A transfer that is given up (the target went silent)
starts the wait over.

Thread-safety: the rule is pure; one balancer thread per broker steps it for every group this
broker leads and carries out the transfers, one at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.periodic import PeriodicThread
from services.broker.replication.placement import preferred_leader
from services.broker.replication.raft import RaftState, Role

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BalanceRule:
    steady_s: float = 2.0
    fetch_fresh_s: float = 1.0
    lag_entries_max: int = 16

    def ready(self, state: RaftState, preferred: int, now: float) -> bool:
        """Whether `preferred` could take the group over from this leader now."""
        if state.role is not Role.LEADER or state.transfer_to is not None:
            return False
        if preferred == state.leader_id or preferred in state.learners:
            return False
        held = state.match.get(preferred)
        fetched_at = state.last_fetch_s.get(preferred)
        return (held is not None and fetched_at is not None
                and state.log.end - held <= self.lag_entries_max
                and now - fetched_at <= self.fetch_fresh_s)

    def step(self, ready_since: float | None, state: RaftState, preferred: int, now: float
             ) -> tuple[float | None, bool]:
        """(when `preferred` became ready, None if it is not; whether to hand over now)."""
        if not self.ready(state, preferred, now):
            return None, False
        since = now if ready_since is None else ready_since
        return since, now - since >= self.steady_s


class LeaderBalancer:
    def __init__(self, nodes: Sequence, rule: BalanceRule | None = None,
                 interval_s: float = 0.25, transfer_timeout_s: float = 3.0,
                 clock: Callable[[], float] | None = None) -> None:
        """`nodes`: the broker's ReplicationNodes, one per group (`config.group`)."""
        self._nodes = list(nodes)
        self._rule = rule or BalanceRule()
        self._transfer_timeout_s = transfer_timeout_s
        self._clock = clock
        self._ready_since: dict[int, float | None] = {}
        self.handed_over = 0  # transfers to a preferred leader that took (tests, logs)
        self._thread = PeriodicThread("kaska-leader-balancer", interval_s, self._check_all)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _check_all(self) -> None:
        for node in self._nodes:
            if self._thread.stopping:
                return
            self.check(node)

    def check(self, node) -> bool:
        """One step for one group; True when it handed the group over."""
        group = node.config.group
        preferred = preferred_leader(group, node.raft_config.voters)
        now = (self._clock or node.clock)()
        since, hand_over = self._rule.step(self._ready_since.get(group), node.state,
                                           preferred, now)
        self._ready_since[group] = since
        if not hand_over:
            return False
        self._ready_since[group] = None
        log.info("%s: handing the group to its preferred leader, broker %d (kept up for "
                 "%.1f s)", node.name, preferred, now - since)
        if node.transfer_leadership(self._transfer_timeout_s, target=preferred):
            self.handed_over += 1
            return True
        return False
