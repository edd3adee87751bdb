"""When an acknowledged session's topics may be deleted (spark/service/session_cleanup.py):
retention, running jobs, the committed SessionEnded, retries. Pure state, no clock."""

from __future__ import annotations

import pytest

from spark.service.session_cleanup import RETRY_PAUSE_S_MAX, SessionCleanup, retention_due_s


def test_an_ack_with_no_retention_is_due_at_once():
    cleanup = SessionCleanup(retention_s=0.0)
    cleanup.acked("c1", 0, 7, now_s=100.0, age_s=0.0)
    assert cleanup.due(100.0, running=set(), committed={0: 0}) == ["c1"]
    assert cleanup.deleted("c1") == [(0, 7)]
    assert cleanup.waiting() == 0
    assert cleanup.due(100.0, running=set(), committed={0: 0}) == []


@pytest.mark.parametrize(("age_s", "due_after_s"), [
    (0.0, 60.0),     # just written: the whole retention
    (45.0, 15.0),    # read again after a restart: what is left of it
    (600.0, 0.0),    # older than the retention: at once
    (-3600.0, 60.0),  # a writer clock far ahead: never longer than the retention
])
def test_retention_counts_from_the_ack_record(age_s, due_after_s):
    assert retention_due_s(1000.0, 60.0, age_s) == 1000.0 + due_after_s
    cleanup = SessionCleanup(retention_s=60.0)
    cleanup.acked("c1", 0, 3, now_s=1000.0, age_s=age_s)
    if due_after_s > 0:
        assert cleanup.due(1000.0 + due_after_s - 0.001, set(), {0: 0}) == []
    assert cleanup.due(1000.0 + due_after_s, set(), {0: 0}) == ["c1"]


def test_never_while_a_job_for_the_client_runs():
    cleanup = SessionCleanup(retention_s=0.0)
    cleanup.acked("c1", 0, 5, now_s=0.0, age_s=0.0)
    cleanup.acked("c2", 0, 6, now_s=0.0, age_s=0.0)
    assert cleanup.due(1.0, running={"c1"}, committed={0: 0}) == ["c2"]
    assert cleanup.due(1.0, running=set(), committed={0: 0}) == ["c1", "c2"]


def test_never_before_the_sessions_ended_record_is_committed():
    """Finished is not enough: a service killed after deleting would redo the SessionEnded
    from its committed position and find the input gone."""
    cleanup = SessionCleanup(retention_s=0.0)
    cleanup.ended("c1", 0, 10)
    cleanup.acked("c1", 0, 12, now_s=0.0, age_s=0.0)
    assert cleanup.due(1.0, set(), committed={0: 10}) == []  # 10 itself not yet committed
    assert cleanup.due(1.0, set(), committed={}) == []  # partition unknown: not committed
    assert cleanup.due(1.0, set(), committed={0: 11}) == ["c1"]
    # Once committed it stays so: a later view needs no commit to be passed in again.
    assert cleanup.due(1.0, set(), committed={0: 0}) == ["c1"]


def test_a_repeated_session_ended_must_be_committed_too():
    cleanup = SessionCleanup(retention_s=0.0)
    cleanup.ended("c1", 0, 10)
    cleanup.ended("c1", 0, 20)  # a byte-identical repeat the broker stored again
    cleanup.ended("c1", 0, 15)  # never moves back
    cleanup.acked("c1", 0, 12, now_s=0.0, age_s=0.0)
    assert cleanup.due(1.0, set(), committed={0: 16}) == []
    assert cleanup.due(1.0, set(), committed={0: 21}) == ["c1"]


def test_other_clients_sessions_do_not_hold_a_deletion_back():
    cleanup = SessionCleanup(retention_s=0.0)
    cleanup.ended("c2", 0, 30)  # uncommitted, but another client's
    cleanup.acked("c1", 0, 31, now_s=0.0, age_s=0.0)
    assert cleanup.due(0.0, set(), committed={0: 30}) == ["c1"]


def test_repeated_acks_are_one_deletion_that_finishes_every_place():
    cleanup = SessionCleanup(retention_s=10.0)
    cleanup.acked("c1", 0, 4, now_s=0.0, age_s=0.0)
    cleanup.acked("c1", 0, 9, now_s=5.0, age_s=0.0)  # keeps the first deadline
    assert cleanup.waiting() == 1
    assert cleanup.due(10.0, set(), {0: 0}) == ["c1"]
    assert cleanup.deleted("c1") == [(0, 4), (0, 9)]


def test_a_failed_deletion_is_retried_with_a_growing_pause():
    cleanup = SessionCleanup(retention_s=0.0)
    cleanup.acked("c1", 0, 1, now_s=0.0, age_s=0.0)
    pauses = [cleanup.failed("c1", now_s=100.0) for _ in range(8)]
    assert pauses[:3] == [1.0, 2.0, 4.0] and pauses[-1] == RETRY_PAUSE_S_MAX
    assert cleanup.due(100.0 + RETRY_PAUSE_S_MAX - 0.001, set(), {0: 0}) == []
    assert cleanup.due(100.0 + RETRY_PAUSE_S_MAX, set(), {0: 0}) == ["c1"]


def test_full_when_waiting_max_sessions_wait():
    cleanup = SessionCleanup(retention_s=3600.0, waiting_max=2)
    cleanup.acked("c1", 0, 1, now_s=0.0, age_s=0.0)
    assert not cleanup.full()
    cleanup.acked("c2", 0, 2, now_s=0.0, age_s=0.0)
    assert cleanup.full()
    cleanup.deleted("c1")
    assert not cleanup.full()
