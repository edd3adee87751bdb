"""Load slows writers; it does not cost leadership. A leader whose followers' confirmations
arrive late (a loaded machine: a fetch round outlasting the lease) holds a write until the
lease is back instead of refusing it, at most `lease_wait_s`; a leader that really lost its
leadership still answers NOT_LEADER, at once when it learns of it. And the replication loop
no longer fsyncs the commit checkpoint between two fetches (a follower's stall there made its
confirmations late). Real ReplicationNode, ReplicaManager, Log and produce handler; the clock
is moved by hand and the follower's fetches are `answer_fetch` calls."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.kaska.errors import NotLeaderError
from common.kaska.protocol.produce import ACKS_ALL, ProduceRequest
from services.broker.handlers import produce
from services.broker.replication import raft
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest
from tests.unit.broker.replication.test_replication_lease import ACKS_ONE, Handlers
from tests.unit.broker.replication.test_replication_safety import (
    Clock,
    confirm_lease,
    follower_keeping_up,
    leader_with_topic,
)
from tests.unit.broker.replication.test_replication_safety import log as log  # noqa: F401
from tests.unit.broker.storage.batches import batch

WAIT_FOR_SCENARIO_S = 10.0


@pytest.fixture
def leader(log):
    """Broker 1 leads epoch 1 with topic t, and its lease."""
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    handlers = Handlers(log, manager)
    try:
        yield SimpleNamespace(node=node, manager=manager, clock=clock, handlers=handlers)
    finally:
        handlers.close()
        node.stop()


def lapse_lease(leader) -> None:
    """The followers' confirmations are late: the clock passes the lease's end, no more."""
    node = leader.node
    leader.clock.now_s += node.raft_config.lease_timeout_s + 0.05
    assert node.state.role is raft.Role.LEADER and not node.holds_lease()


def produce_in_background(leader, acks: int) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            leader.handlers.call(produce, ProduceRequest("t", 0, acks, batch(b"late"))).wait()
            outcome["answered"] = True
        except NotLeaderError as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_until_waiting_for_lease(node, thread: threading.Thread) -> None:
    deadline = time.monotonic() + WAIT_FOR_SCENARIO_S
    while getattr(node.counters, "lease_waits", 0) < 1 and thread.is_alive():
        assert time.monotonic() < deadline, "the produce neither waited nor was answered"
        time.sleep(0.005)


@pytest.mark.parametrize("acks", [ACKS_ONE, ACKS_ALL])
def test_a_write_that_finds_the_lease_lapsed_waits_and_is_taken_once_confirmed(leader, acks):
    """Before: NOT_LEADER ("holds no leader lease") at once, from a leader nobody deposed."""
    node = leader.node
    end = node.journal.end
    lapse_lease(leader)
    thread, outcome = produce_in_background(leader, acks)
    wait_until_waiting_for_lease(node, thread)
    assert thread.is_alive(), f"the write was not held for the lease: {outcome}"
    assert node.journal.end == end, "nothing is taken before the lease is back"
    with follower_keeping_up(node):
        confirm_lease(node)
        thread.join(WAIT_FOR_SCENARIO_S)
    assert not thread.is_alive()
    assert outcome == {"answered": True}
    assert node.journal.end == end + 1
    assert leader.handlers.counters.lease_refusals == 0


def test_a_lease_that_never_comes_back_is_refused_after_the_wait(leader):
    node = leader.node
    end = node.journal.end
    lapse_lease(leader)
    started = time.monotonic()
    thread, outcome = produce_in_background(leader, ACKS_ONE)
    thread.join(node.config.lease_wait_s + WAIT_FOR_SCENARIO_S)
    waited_s = time.monotonic() - started
    assert node.counters.lease_waits == 1
    assert isinstance(outcome.get("error"), NotLeaderError), outcome
    assert "no leader lease" in str(outcome["error"]) and outcome["error"].retriable
    assert waited_s >= node.config.lease_wait_s, "bounded by lease_wait_s, not shorter"
    assert node.journal.end == end
    assert leader.handlers.counters.lease_refusals == 1


def test_a_leader_deposed_while_a_write_waits_answers_not_leader_at_once(leader, monkeypatch):
    """The step-down wakes the write: a lease wait far longer than the test waits for the
    answer (the end of the wait would answer NOT_LEADER too, only late)."""
    node = leader.node
    monkeypatch.setattr(node, "config", replace(node.config,
                                                lease_wait_s=6 * WAIT_FOR_SCENARIO_S))
    lapse_lease(leader)
    thread, outcome = produce_in_background(leader, ACKS_ONE)
    wait_until_waiting_for_lease(node, thread)
    assert thread.is_alive()
    # Broker 2 fetches in a newer epoch: it was elected meanwhile; this broker steps down.
    node.answer_fetch(ReplicaFetchRequest(2, node.state.epoch + 1, node.journal.end,
                                          node.journal.last_epoch, 1 << 20, 0))
    assert node.state.role is raft.Role.FOLLOWER
    thread.join(WAIT_FOR_SCENARIO_S)
    assert not thread.is_alive(), "not woken by the step-down: held for the whole lease wait"
    assert isinstance(outcome.get("error"), NotLeaderError), outcome


def test_the_loop_tick_never_fsyncs_the_commit_checkpoint(leader, monkeypatch):
    """A follower's loop fsynced the commit and applied indexes between two fetches; under
    a write load each fsync waited for the partitions' dirty pages (0.1-0.26 s measured) and
    the leader's lease lapsed. The commit saver does it on its own thread."""
    node = leader.node
    saved: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if name.startswith(("commit", "applied")):
            saved.append(name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with follower_keeping_up(node):
        leader.manager.partition("t", 0).append(batch(b"moves the commit"))
    leader.clock.now_s += node.config.commit_persist_interval_s + 1.0
    assert node.state.commit > node._persisted_commit, "a save is due"
    node.tick()
    assert saved == [], "the loop's tick fsynced the commit checkpoint"
    node.save_commit_if_due()
    assert {name.split(".")[0] for name in saved} == {"commit", "applied"}
    assert node._persisted_commit == node.state.commit
