"""Fake inputs of the status page's model: checker answers, broker reports, sessions."""

from __future__ import annotations

from services.status.brokers import BrokerReport, GroupHealth
from services.status.checkers import CheckerStatus
from services.status.sessions import QueryProgress, SessionProgress

CID = "c0ffee00-0000-4000-8000-000000000001"


def service(name: str, phase: str = "up", restarts: int = 0, seen_age_s: float | None = 0.3,
            heal: tuple[float, float] | None = None) -> dict:
    return {"name": name, "phase": phase, "since_age_s": 5.0, "last_seen_age_s": seen_age_s,
            "restarts": restarts, "last_restart_age_s": None, "cause": "",
            "restart_in_flight": False,
            "last_heal_at_s": None if heal is None else heal[0],
            "last_heal_s": None if heal is None else heal[1]}


def checker(node_id: int, role: str, leader_id: int | None, services: list[dict],
            events: list[dict] = (), since_s: float | None = 900.0) -> CheckerStatus:
    return CheckerStatus(f"healthchecker-{node_id}", node_id, role, leader_id, since_s,
                         tuple(services), tuple(events))


def checkers_with_broker_2_dead() -> dict[str, CheckerStatus]:
    """Checker 3 leads; it sees broker-2 dead, checker 1 (a follower) still sees it up."""
    leader_view = [service("broker-1"), service("broker-2", "dead", restarts=2, seen_age_s=4.0),
                   service("healthchecker-1"), service("healthchecker-2")]
    follower_view = [service("broker-1"), service("broker-2", heal=(950.0, 1.5)),
                     service("healthchecker-2"), service("healthchecker-3", seen_age_s=0.1)]
    return {"healthchecker-1": checker(1, "follower", 3, follower_view),
            "healthchecker-3": checker(3, "leader", 3, leader_view, since_s=800.0)}


def brokers() -> dict[str, BrokerReport]:
    """Broker 2 is dead. Of the three replication groups, broker 1 leads group 0 (2 of 3 in
    sync: its 3 partitions under-replicated) and broker 3 group 1, where only 3 is in sync (no
    healthy majority); group 2's leader is not reachable."""
    groups = (0, 1, 2)
    leader = BrokerReport("broker-1", 1, "leader", 4, 1, 200,
                          {("sessions", 0): (2, 2), (f"flights.{CID}", 0): (30, 28),
                           (f"airports.{CID}", 0): (5, 5)}, {2: 0, 3: 7}, led_groups=(0,),
                          groups=groups, group_health={0: GroupHealth(4, 3, 2, 3)})
    follower = BrokerReport("broker-3", 3, "follower", 4, 1, 193,
                            {("sessions", 0): (2, 2), (f"flights.{CID}", 0): (25, 25),
                             (f"airports.{CID}", 0): (5, 5)}, led_groups=(1,), groups=groups,
                            group_health={1: GroupHealth(6, 3, 1, 2)})
    return {"broker-1": leader, "broker-3": follower}


def sessions() -> list[SessionProgress]:
    """Running: 12 of its 20 stored flights batches folded. Done: all 36 folded. New: its
    flights offsets not read yet."""
    running = SessionProgress(CID, partitions=4, folded_records=12, stored_records=20)
    done = SessionProgress("d0ne", 4, ended=True, batches_total=40, rows_sent=12000,
                           rows_rejected=3, queries={q: QueryProgress(True, 10)
                                                     for q in ("q1", "q2", "q3", "q4")},
                           folded_records=36, stored_records=36)
    new = SessionProgress("n3w", partitions=4)
    return [running, done, new]
