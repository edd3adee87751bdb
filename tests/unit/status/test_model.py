"""The status page's data model (services/status/model.py) from fake inputs, and the shape of
the document `/api/status` serves (a plain check of keys and types: the schema)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from services.status import model
from services.status.brokers import GroupHealth
from services.status.timeline import TimelineEvent
from tests.unit.status.fakes import CID, brokers, checkers_with_broker_2_dead, sessions


def document(**overrides) -> dict:
    inputs = dict(now_s=1000.0, refresh_interval_s=1.0, checkers=checkers_with_broker_2_dead(),
                  checker_errors={"healthchecker-2": "CheckerUnreachableError: refused"},
                  broker_names=["broker-1", "broker-2", "broker-3"], brokers=brokers(),
                  broker_errors={"broker-2": "BrokerUnreachableError: refused"},
                  sessions=sessions(), sessions_error=None,
                  timeline=[TimelineEvent(990.0, "death", "broker-2", "lost",
                                          ("healthchecker-1", "healthchecker-3"))],
                  upload_rate=[(998.0, 3.0), (999.0, 4.5)],
                  links=[("Spark master UI", "http://127.0.0.1:8080/")],
                  partitions_shown_max=10)
    return model.build_status(**{**inputs, **overrides})


def test_the_leaders_view_wins_and_the_leader_itself_comes_from_its_peers():
    services = {row["name"]: row for row in document()["services"]}
    assert services["broker-2"]["state"] == "dead" and services["broker-2"]["restarts"] == 2
    assert services["broker-2"]["seen_by"] == "healthchecker-3"
    assert services["healthchecker-3"]["state"] == "up"
    assert services["healthchecker-3"]["seen_by"] == "healthchecker-1"
    # The last heal any checker saw, even when the leader's row is the one shown.
    assert (services["broker-2"]["last_heal_at_s"], services["broker-2"]["last_heal_s"]) == (
        950.0, 1.5)


def test_the_checker_leader_is_the_one_that_claims_it_else_the_one_followers_name():
    doc = document()
    assert doc["checkers"]["leader"] == "healthchecker-3"
    assert doc["checkers"]["leader_since_s"] == 800.0
    followers = {name: c for name, c in checkers_with_broker_2_dead().items()
                 if c.role == "follower"}
    assert model.checker_leader(followers) == ("healthchecker-3", 900.0)
    assert model.checker_leader({}) == (None, None)


def test_a_checker_nobody_tracks_is_up_because_it_answered():
    [lone] = [c for c in checkers_with_broker_2_dead().values() if c.node_id == 1]
    services = {row["name"]: row for row in document(checkers={lone.name: lone})["services"]}
    assert services["healthchecker-1"]["state"] == "up"


def test_brokers_leader_epoch_partitions_and_lag():
    cluster = document()["brokers"]
    assert (cluster["leader"], cluster["epoch"]) == ("broker-1", 4)
    by_name = {b["name"]: b for b in cluster["brokers"]}
    assert not by_name["broker-2"]["reachable"] and "refused" in by_name["broker-2"]["error"]
    assert by_name["broker-3"]["journal_lag_entries"] == 7
    assert by_name["broker-1"]["journal_lag_entries"] is None
    first, *rest = cluster["partitions"]
    # Lagging partitions first: broker-3 misses 5 offsets of the flights partition.
    assert (first["topic"], first["log_end_offset"], first["high_watermark"]) == (
        f"flights.{CID}", 30, 28)
    assert first["follower_lag_offsets"] == {"broker-3": 5}
    assert cluster["partitions_total"] == 3 and len(rest) == 2
    assert len(document(partitions_shown_max=1)["brokers"]["partitions"]) == 1


def test_sessions_upload_progress_rows_and_queries():
    running, done, _new = document()["sessions"]
    assert running["batches_uploaded"] == 28 + 5 and running["batches_total"] is None
    assert running["rows_sent"] is None and not running["ended"] and not running["done"]
    assert done["batches_uploaded"] == done["batches_total"] == 40  # topics may be deleted
    assert done["rows_sent"] == 12000 and done["done"]
    assert [(q["query"], q["done"], q["result_rows"]) for q in done["queries"]] == [
        (q, True, 10) for q in ("q1", "q2", "q3", "q4")]


def test_sessions_folding_progress_is_folded_stored_and_the_backlog_between():
    running, done, new = document()["sessions"]
    assert [(s["folded_records"], s["stored_records"], s["backlog_records"])
            for s in (running, done, new)] == [(12, 20, 8), (36, 36, 0), (None, None, None)]


def test_each_groups_health_is_its_leaders_word():
    cluster = document()["brokers"]
    by_group = {g["group"]: g for g in cluster["groups"]}
    assert by_group[0] == {"group": 0, "leader": "broker-1", "voters": 3, "in_sync": 2,
                           "majority": 2, "under_replicated_partitions": 3,
                           "state": "under-replicated"}
    assert (by_group[1]["leader"], by_group[1]["in_sync"], by_group[1]["state"]) == (
        "broker-3", 1, "no healthy majority")
    assert (by_group[2]["leader"], by_group[2]["in_sync"], by_group[2]["state"]) == (
        None, None, "unknown"), "its leader is unreachable: nobody else knows"
    assert cluster["under_replicated_partitions"] == 3 + 2
    assert cluster["groups_without_healthy_majority"] == [1]


@pytest.mark.parametrize(("voters", "in_sync", "state"), [
    (3, 3, "healthy"), (3, 2, "under-replicated"), (3, 1, "no healthy majority"),
    (5, 3, "under-replicated"), (5, 2, "no healthy majority"), (1, 1, "healthy"),
])
def test_a_group_without_a_majority_in_sync_runs_without_a_healthy_majority(voters, in_sync,
                                                                             state):
    assert model.group_state(GroupHealth(1, voters, in_sync, 0)) == state
    assert model.group_state(None) == "unknown"


def test_a_stale_leader_of_a_group_loses_to_the_one_of_the_higher_epoch():
    reports = brokers()
    stale = replace(reports["broker-1"], led_groups=(0, 1),
                    group_health={**reports["broker-1"].group_health,
                                  1: GroupHealth(5, 3, 3, 0)})
    groups = document(brokers={**reports, "broker-1": stale})["brokers"]["groups"]
    assert (groups[1]["leader"], groups[1]["state"]) == ("broker-3", "no healthy majority")


def test_no_reachable_broker_leaves_the_cluster_empty_not_broken():
    cluster = document(brokers={})["brokers"]
    assert cluster["leader"] is None and cluster["partitions"] == []
    assert all(not b["reachable"] for b in cluster["brokers"])
    assert cluster["groups"] == [] and cluster["under_replicated_partitions"] == 0


# -- the schema of /api/status -----------------------------------------------------------------

NUMBER = (int, float)
OPTIONAL_NUMBER = (int, float, type(None))
SCHEMA = {
    "format": int, "generated_at_s": NUMBER, "refresh_interval_s": NUMBER, "services": list,
    "checkers": dict, "brokers": dict, "sessions": list, "sessions_error": (str, type(None)),
    "timeline": list, "upload_batches_per_s": list, "links": list,
}
SERVICE = {"name": str, "state": str, "heartbeat_age_s": OPTIONAL_NUMBER,
           "state_age_s": OPTIONAL_NUMBER, "restarts": int, "restart_in_flight": bool,
           "cause": str, "last_heal_at_s": OPTIONAL_NUMBER, "last_heal_s": OPTIONAL_NUMBER,
           "seen_by": str}
CHECKERS = {"leader": (str, type(None)), "leader_since_s": OPTIONAL_NUMBER, "answered": list,
            "errors": dict}
BROKERS = {"leader": (str, type(None)), "epoch": (int, type(None)), "brokers": list,
           "partitions_total": int, "partitions": list, "groups": list,
           "under_replicated_partitions": int, "groups_without_healthy_majority": list}
GROUP = {"group": int, "leader": (str, type(None)), "voters": (int, type(None)),
         "in_sync": (int, type(None)), "majority": (int, type(None)),
         "under_replicated_partitions": (int, type(None)), "state": str}
BROKER = {"name": str, "reachable": bool, "error": (str, type(None)), "role": (str, type(None)),
          "epoch": (int, type(None)), "commit_index": (int, type(None)),
          "journal_lag_entries": (int, type(None)), "led_groups": list}
PARTITION = {"topic": str, "partition": int, "log_end_offset": int, "high_watermark": int,
             "follower_lag_offsets": dict}
SESSION = {"client_id": str, "partitions": int, "ended": bool,
           "batches_uploaded": (int, type(None)), "batches_total": (int, type(None)),
           "rows_sent": (int, type(None)), "rows_rejected": (int, type(None)), "done": bool,
           "queries": list, "folded_records": (int, type(None)),
           "stored_records": (int, type(None)), "backlog_records": (int, type(None))}
QUERY = {"query": str, "done": bool, "result_rows": int}
EVENT = {"at_s": NUMBER, "kind": str, "service": str, "detail": str, "reporters": list}
LINK = {"name": str, "url": str}


def check(value: dict, schema: dict, where: str) -> None:
    assert set(value) == set(schema), (where, sorted(value), sorted(schema))
    for key, types in schema.items():
        assert isinstance(value[key], types), (where, key, value[key])


def check_document(doc: dict) -> None:
    """The schema `/api/status` keeps (README: 'Watching it heal')."""
    check(doc, SCHEMA, "document")
    check(doc["checkers"], CHECKERS, "checkers")
    check(doc["brokers"], BROKERS, "brokers")
    for key, schema, rows in (("service", SERVICE, doc["services"]),
                              ("broker", BROKER, doc["brokers"]["brokers"]),
                              ("partition", PARTITION, doc["brokers"]["partitions"]),
                              ("group", GROUP, doc["brokers"]["groups"]),
                              ("session", SESSION, doc["sessions"]),
                              ("event", EVENT, doc["timeline"]), ("link", LINK, doc["links"])):
        for row in rows:
            check(row, schema, key)
    for session in doc["sessions"]:
        for query in session["queries"]:
            check(query, QUERY, "query")
    for point in doc["upload_batches_per_s"]:
        assert len(point) == 2 and all(isinstance(v, NUMBER) for v in point)


def test_the_document_keeps_its_schema_and_is_json():
    doc = document()
    check_document(doc)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["services"] and doc["sessions"] and doc["timeline"] and doc["links"]
