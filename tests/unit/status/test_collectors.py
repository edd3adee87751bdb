"""The status page's collectors, on their pure parts: the brokers' metrics text (as the real
broker collector writes it), the checkers' answers, and the session ledger."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from common.flights.session_records import (
    QueryDone,
    ResultRows,
    ResultsAcked,
    SessionEnded,
    SessionStarted,
)
from healthchecker.status import status_document
from services.status.brokers import (
    GroupHealth,
    MalformedBrokerMetricsError,
    broker_report_from_text,
)
from services.status.checkers import MalformedCheckerStatusError, parse_checker_status
from services.status.sessions import SessionLedger
from tests.unit.healthchecker.test_checker_status import status_node
from tests.unit.metrics_fakes import NOW_S, fake_broker_registry


def test_a_broker_report_from_the_brokers_own_metrics_text():
    text = generate_latest(fake_broker_registry()).decode()
    report = broker_report_from_text("broker-1", 1, text)
    assert (report.role, report.epoch, report.leader_id, report.commit_index) == (
        "leader", 7, 1, 40)
    assert report.partitions == {("flights.c1", 0): (15, 12), ("flights.c1", 1): (0, 0)}
    assert report.follower_lag_entries == {2: 10, 3: 50}
    assert report.produced_records == 15
    assert report.led_groups == (0,)
    # The fake leader's followers never caught up: only itself is in sync.
    assert report.group_health == {0: GroupHealth(epoch=7, voters=3, in_sync=1,
                                                  under_replicated_partitions=3)}


def test_a_broker_of_several_groups_reports_the_metadata_groups_role_and_the_groups_it_leads():
    """Broker 2 follows the metadata group (group 0) at epoch 4 and leads groups 1 and 2."""
    text = "\n".join([
        'kaska_replication_role{group="0",role="follower"} 1.0',
        'kaska_replication_role{group="0",role="leader"} 0.0',
        'kaska_replication_role{group="1",role="leader"} 1.0',
        'kaska_replication_role{group="2",role="leader"} 1.0',
        'kaska_replication_epoch{group="0"} 4.0', 'kaska_replication_epoch{group="1"} 9.0',
        'kaska_replication_leader_id{group="0"} 1.0', 'kaska_replication_leader_id{group="1"} 2.0',
        'kaska_replication_commit_index{group="0"} 30.0',
        'kaska_replication_commit_index{group="1"} 70.0',
        'kaska_replication_follower_lag_entries{group="1",follower="3"} 5.0', ""])
    report = broker_report_from_text("broker-2", 2, text)
    assert (report.role, report.epoch, report.leader_id, report.commit_index) == (
        "follower", 4, 1, 30)
    assert report.led_groups == (1, 2)
    assert report.groups == (0, 1, 2)
    assert report.follower_lag_entries == {}, "another group's followers are not this one's"
    assert report.group_health == {}, "no in-sync replicas reported: unknown"


def test_a_broker_reports_the_health_of_the_groups_it_leads_only():
    """Broker 2 leads group 1 (2 of 3 in sync) and follows group 0, whose leader it is not:
    its zero of under-replicated partitions there says nothing of group 0's health."""
    text = "\n".join([
        'kaska_replication_role{group="0",role="follower"} 1.0',
        'kaska_replication_role{group="1",role="leader"} 1.0',
        'kaska_replication_epoch{group="0"} 4.0', 'kaska_replication_epoch{group="1"} 9.0',
        'kaska_replication_group_voters{group="0"} 3.0',
        'kaska_replication_group_voters{group="1"} 3.0',
        'kaska_replication_in_sync_replicas{group="1"} 2.0',
        'kaska_under_replicated_partitions{group="0"} 0.0',
        'kaska_under_replicated_partitions{group="1"} 4.0', ""])
    report = broker_report_from_text("broker-2", 2, text)
    assert report.group_health == {1: GroupHealth(epoch=9, voters=3, in_sync=2,
                                                  under_replicated_partitions=4)}


@pytest.mark.parametrize("text", ["# nothing here\n", "kaska_replication_epoch{ 1\n"])
def test_metrics_without_the_replication_gauges_are_an_error(text):
    with pytest.raises(MalformedBrokerMetricsError):
        broker_report_from_text("broker-1", 1, text)


def test_a_checkers_answer_parses_and_a_foreign_one_is_an_error():
    doc = status_document(status_node(), NOW_S, 1010.0)
    status = parse_checker_status("healthchecker-2", doc)
    assert (status.node_id, status.role, status.leader_id) == (2, "follower", 3)
    assert {row["name"] for row in status.services} == {"svc", "spark-master"}
    for bad in ({**doc, "format": 99}, {**doc, "services": [{"name": 1}]},
                {**doc, "leader_id": "three"}, [1, 2]):
        with pytest.raises(MalformedCheckerStatusError):
            parse_checker_status("healthchecker-2", bad)


def test_the_ledger_follows_a_session_from_start_to_done():
    ledger = SessionLedger(sessions_max=4)
    ledger.apply_session_record(SessionStarted("c1", 4))
    ledger.apply_result_record("c1", ResultRows("q1", 0, [["a"], ["b"]]))
    ledger.apply_result_record("c1", ResultRows("q1", 0, [["a"], ["b"]]))  # a re-run's repeat
    assert ledger.sessions["c1"].queries["q1"].result_rows == 2
    ledger.apply_session_record(SessionEnded("c1", {"flights.c1": [3, 4], "airports.c1": [1]},
                                             {"flights": 900, "airports": 100},
                                             {"wrong_field_count": 2}))
    session = ledger.sessions["c1"]
    assert (session.ended, session.batches_total, session.rows_sent, session.rows_rejected) == (
        True, 8, 1000, 2)
    assert not session.done
    for query in ("q1", "q2", "q3", "q4"):
        ledger.apply_result_record("c1", QueryDone(query, 5))
    assert ledger.sessions["c1"].done
    assert ledger.sessions["c1"].queries["q1"].result_rows == 5


def test_an_acknowledged_session_is_done_even_if_its_results_were_never_read():
    ledger = SessionLedger(sessions_max=4)
    ledger.apply_session_record(SessionStarted("c1", 4))
    ledger.apply_result_record("c1", QueryDone("q1", 7))
    ResultsAcked = type("ResultsAcked", (), {"client_id": "c1"})  # noqa: N806 - a record type
    ledger.apply_session_record(ResultsAcked())
    session = ledger.sessions["c1"]
    assert session.acked and session.done
    assert session.queries["q1"].result_rows == 7 and session.queries["q2"].done


def test_an_ack_gives_the_rows_the_client_saved_when_the_results_were_never_read():
    """A small session's results can be written, read and deleted between two polls."""
    ledger = SessionLedger(sessions_max=4)
    ledger.apply_session_record(SessionStarted("c1", 4))
    ledger.apply_result_record("c1", ResultRows("q2", 0, [["x", "A-B", "1.0"]] * 3))
    ledger.apply_session_record(ResultsAcked("c1", {"q1": 5, "q2": 9, "q3": 0, "q4": 2}))
    session = ledger.sessions["c1"]
    assert session.done
    assert {q: p.result_rows for q, p in session.queries.items()} == {
        "q1": 5, "q2": 9, "q3": 0, "q4": 2}


def test_the_ledger_keeps_the_newest_sessions_only():
    ledger = SessionLedger(sessions_max=2)
    for cid in ("a", "b", "c"):
        ledger.apply_session_record(SessionStarted(cid, 1))
    ledger.apply_result_record("a", QueryDone("q1", 1))  # forgotten: ignored
    assert list(ledger.sessions) == ["b", "c"]
