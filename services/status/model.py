"""The page's data model: one JSON-ready document built from what the collectors brought back,
by pure functions (no I/O, no clock: `now_s` is an input), so every rule below is tested on
fake inputs. The HTML page and `/api/status` show the same document.

Rules:
- services: each checker tracks every service (healthchecker/supervision/); the leader's view
  wins (it restarts), then the other checkers' in name order. A checker does not track itself,
  so the leader's own row comes from its peers. A checker that answered but that nobody tracks
  (a deployment of one checker) is up: it answered. Last heal: the latest any checker saw.
- checker leader: a checker that says it leads (the highest node id if several claim it, as the
  bully algorithm settles it), else the leader most followers name.
- brokers: the leader is a reachable broker in the leader role, of the highest epoch; per
  partition its log end offset and high watermark, and each other reachable broker's lag (the
  leader's log end offset minus its own).
- replication groups: each group's health is its leader's word (only a leader knows which
  replicas are in sync): the reachable broker leading it at the highest epoch. A group runs
  without a healthy majority when fewer of its voters than a majority are in sync (its commits
  wait on replicas that lag or are gone); under-replicated when some voter is not in sync (with
  three voters: one more fault and it stops); its state is unknown when no reachable broker
  leads it or its leader does not report in-sync replicas. The cluster's under-replicated
  partitions are the sum of the groups' as their leaders count them.
- sessions: upload progress in batches (the high watermarks of the session's data topics on
  the leader), rows once the session ended, each query done or not with its result rows; the
  folding progress of its flights topic in records (one per batch), as the session tracker
  last read it (sessions.py): folded (the sum of the log starts), stored (of the high
  watermarks) and the backlog between them, None until first read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from common.flights.session_records import airports_topic, flights_topic
from services.status.brokers import BrokerReport, GroupHealth
from services.status.checkers import CheckerStatus
from services.status.sessions import SessionProgress
from services.status.timeline import TimelineEvent

FORMAT = 1
# Supervision phases as the page shows them.
STATES = {"up": "up", "starting": "starting", "dead": "dead", "departed": "stopped",
          "unknown": "unknown"}
STATE_UP = "up"
# A replication group's state, as the page shows it.
GROUP_HEALTHY = "healthy"
GROUP_UNDER_REPLICATED = "under-replicated"
GROUP_WITHOUT_MAJORITY = "no healthy majority"
GROUP_UNKNOWN = "unknown"


def checker_name(node_id: int) -> str:
    return f"healthchecker-{node_id}"


def checker_leader(checkers: Mapping[str, CheckerStatus]) -> tuple[str | None, float | None]:
    """(leader's name, wall clock since it leads) or (None, None)."""
    claims = sorted((c for c in checkers.values() if c.role == "leader"),
                    key=lambda c: c.node_id)
    if claims:
        return checker_name(claims[-1].node_id), claims[-1].leader_since_s
    named = Counter(c.leader_id for c in checkers.values() if c.leader_id is not None)
    if not named:
        return None, None
    leader_id, _votes = named.most_common(1)[0]
    since = min((c.leader_since_s for c in checkers.values()
                 if c.leader_id == leader_id and c.leader_since_s is not None), default=None)
    return checker_name(leader_id), since


def _by_priority(checkers: Mapping[str, CheckerStatus], leader: str | None) -> list:
    return sorted(checkers.values(), key=lambda c: (checker_name(c.node_id) != leader, c.name))


def _service_row(row: dict, reporter: str) -> dict:
    return {
        "name": row["name"],
        "state": STATES.get(row["phase"], row["phase"]),
        "heartbeat_age_s": row.get("last_seen_age_s"),
        "state_age_s": row.get("since_age_s"),
        "restarts": row["restarts"],
        "restart_in_flight": row["restart_in_flight"],
        "cause": row.get("cause", ""),
        "last_heal_at_s": None,
        "last_heal_s": None,
        "seen_by": reporter,
    }


def services(checkers: Mapping[str, CheckerStatus], leader: str | None) -> list[dict]:
    rows: dict[str, dict] = {}
    heals: dict[str, tuple[float, float]] = {}
    for checker in _by_priority(checkers, leader):
        for row in checker.services:
            rows.setdefault(row["name"], _service_row(row, checker.name))
            at_s = row.get("last_heal_at_s")
            if at_s is not None and at_s > heals.get(row["name"], (-1.0, 0.0))[0]:
                heals[row["name"]] = (at_s, row.get("last_heal_s"))
    for checker in checkers.values():  # answered, tracked by nobody: up all the same
        rows.setdefault(checker.name, {**_service_row(
            {"name": checker.name, "phase": "up", "restarts": 0, "restart_in_flight": False},
            checker.name), "heartbeat_age_s": 0.0})
    for name, (at_s, heal_s) in heals.items():
        rows[name]["last_heal_at_s"], rows[name]["last_heal_s"] = at_s, heal_s
    return [rows[name] for name in sorted(rows)]


def broker_leader(reports: Mapping[str, BrokerReport]) -> BrokerReport | None:
    leaders = [r for r in reports.values() if r.role == "leader"]
    return max(leaders, key=lambda r: r.epoch) if leaders else None


def partitions(reports: Mapping[str, BrokerReport], leader: BrokerReport,
               shown_max: int) -> list[dict]:
    """Lagging partitions first, then by topic; at most `shown_max`."""
    rows = []
    followers = [r for r in reports.values() if r is not leader]
    for (topic, partition), (end, high) in leader.partitions.items():
        lags = {f.name: max(end - f.partitions.get((topic, partition), (0, 0))[0], 0)
                for f in sorted(followers, key=lambda f: f.name)}
        rows.append({"topic": topic, "partition": partition, "log_end_offset": end,
                     "high_watermark": high, "follower_lag_offsets": lags})
    rows.sort(key=lambda r: (not any(r["follower_lag_offsets"].values()), r["topic"],
                             r["partition"]))
    return rows[:shown_max]


def group_state(health: GroupHealth | None) -> str:
    if health is None or health.voters < 1:
        return GROUP_UNKNOWN
    if health.in_sync < health.voters // 2 + 1:
        return GROUP_WITHOUT_MAJORITY
    if health.in_sync < health.voters:
        return GROUP_UNDER_REPLICATED
    return GROUP_HEALTHY


def replication_groups(reports: Mapping[str, BrokerReport]) -> list[dict]:
    """One row per replication group any reachable broker runs, by group number."""
    numbers = sorted({g for r in reports.values() for g in (*r.groups, *r.led_groups)})
    rows = []
    for number in numbers:
        claims = [(r.group_health.get(number), r) for r in sorted(reports.values(),
                                                                   key=lambda r: r.name)
                  if number in r.led_groups]
        health, leader = max(claims, key=lambda c: -1 if c[0] is None else c[0].epoch,
                             default=(None, None))
        rows.append({
            "group": number, "leader": None if leader is None else leader.name,
            "voters": None if health is None else health.voters,
            "in_sync": None if health is None else health.in_sync,
            "majority": None if health is None else health.voters // 2 + 1,
            "under_replicated_partitions": None if health is None
            else health.under_replicated_partitions,
            "state": group_state(health)})
    return rows


def broker_cluster(names: Sequence[str], reports: Mapping[str, BrokerReport],
                   errors: Mapping[str, str], shown_max: int) -> dict:
    leader = broker_leader(reports)
    brokers = []
    for name in names:
        report = reports.get(name)
        brokers.append({
            "name": name, "reachable": report is not None, "error": errors.get(name),
            "role": None if report is None else report.role,
            "led_groups": [] if report is None else list(report.led_groups),
            "epoch": None if report is None else report.epoch,
            "commit_index": None if report is None else report.commit_index,
            "journal_lag_entries": None if leader is None or report is None or report is leader
            else leader.follower_lag_entries.get(report.node_id)})
    groups = replication_groups(reports)
    return {
        "leader": None if leader is None else leader.name,
        "epoch": max((r.epoch for r in reports.values()), default=None),
        "brokers": brokers,
        "groups": groups,
        "under_replicated_partitions": sum(g["under_replicated_partitions"] or 0
                                           for g in groups),
        "groups_without_healthy_majority": [g["group"] for g in groups
                                            if g["state"] == GROUP_WITHOUT_MAJORITY],
        "partitions_total": 0 if leader is None else len(leader.partitions),
        "partitions": [] if leader is None else partitions(reports, leader, shown_max),
    }


def uploaded_batches(leader: BrokerReport | None, client_id: str) -> int | None:
    if leader is None:
        return None
    topics = {flights_topic(client_id), airports_topic(client_id)}
    return sum(high for (topic, _), (_, high) in leader.partitions.items() if topic in topics)


def session_rows(sessions: Sequence[SessionProgress], leader: BrokerReport | None) -> list[dict]:
    """An ended session uploaded all its batches (the client writes its end record only once
    every batch is acknowledged), even after its topics were deleted."""
    return [{
        "client_id": s.client_id, "partitions": s.partitions, "ended": s.ended,
        "batches_uploaded": s.batches_total if s.ended else uploaded_batches(leader,
                                                                             s.client_id),
        "batches_total": s.batches_total, "rows_sent": s.rows_sent,
        "rows_rejected": s.rows_rejected, "done": s.done,
        "folded_records": s.folded_records, "stored_records": s.stored_records,
        "backlog_records": s.backlog_records,
        "queries": [{"query": query, "done": p.done, "result_rows": p.result_rows}
                    for query, p in sorted(s.queries.items())],
    } for s in sessions]


def build_status(*, now_s: float, refresh_interval_s: float,
                 checkers: Mapping[str, CheckerStatus], checker_errors: Mapping[str, str],
                 broker_names: Sequence[str], brokers: Mapping[str, BrokerReport],
                 broker_errors: Mapping[str, str], sessions: Sequence[SessionProgress],
                 sessions_error: str | None, timeline: Sequence[TimelineEvent],
                 upload_rate: Sequence[tuple[float, float]],
                 links: Sequence[tuple[str, str]], partitions_shown_max: int) -> dict:
    leader, since = checker_leader(checkers)
    return {
        "format": FORMAT,
        "generated_at_s": now_s,
        "refresh_interval_s": refresh_interval_s,
        "services": services(checkers, leader),
        "checkers": {"leader": leader, "leader_since_s": since,
                     "answered": sorted(checkers), "errors": dict(sorted(checker_errors.items()))},
        "brokers": broker_cluster(broker_names, brokers, broker_errors, partitions_shown_max),
        "sessions": session_rows(sessions, broker_leader(brokers)),
        "sessions_error": sessions_error,
        "timeline": [event.to_json() for event in timeline],
        "upload_batches_per_s": [[round(t, 3), round(v, 3)] for t, v in upload_rate],
        "links": [{"name": name, "url": url} for name, url in links],
    }
