"""Consumer-group membership (services/broker/kafka/consumer_groups.py): the state machine step
by step on a fake clock, then the coordinator's blocking join and sync with real threads."""

import itertools
import threading

from services.broker.kafka.consumer_groups import Group, GroupCoordinator, GroupState
from services.broker.kafka.errors import (
    COORDINATOR_NOT_AVAILABLE,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)

PROTOCOLS = (("range", b"meta-range"), ("roundrobin", b"meta-rr"))
WAIT_S = 10.0
SESSION_S = 10.0
REBALANCE_S = 30.0


def ids():
    counter = itertools.count(1)
    return lambda: f"m{next(counter)}"


def join(group, member_id="", now=0.0, protocols=PROTOCOLS, new_id=None):
    return group.join(member_id, new_id or ids(), SESSION_S, REBALANCE_S, "consumer", protocols,
                      now)


def test_first_member_completes_its_join_at_once_and_leads():
    group = Group("g")
    assert join(group) == (NONE, "m1")
    answer = group.answers["m1"]
    assert (answer.generation, answer.leader, answer.protocol_name) == (1, "m1", "range")
    assert answer.members == (("m1", b"meta-range"),)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.sync("m1", 1, {"m1": b"all"}, 1.0) == NONE
    assert group.sync_answer("m1", 1) == (NONE, b"all")
    assert group.state is GroupState.STABLE


def stable_pair():
    group = Group("g")
    new_id = ids()
    join(group, new_id=new_id)
    group.sync("m1", 1, {"m1": b"a"}, 0.0)
    join(group, now=1.0, new_id=new_id)  # m2 arrives
    return group, new_id


def test_a_new_member_makes_the_others_rejoin():
    group, _ = stable_pair()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat("m1", 1, 2.0) == REBALANCE_IN_PROGRESS
    assert "m2" not in group.answers  # waits for m1
    assert join(group, "m1", now=2.0) == (NONE, "m1")
    leader, follower = group.answers["m1"], group.answers["m2"]
    assert leader.generation == follower.generation == 2 and leader.leader == "m1"
    assert {m for m, _ in leader.members} == {"m1", "m2"} and follower.members == ()
    assert group.sync_answer("m2", 2) is None  # the leader has not synced yet
    assert group.sync("m1", 2, {"m1": b"p0", "m2": b"p1"}, 3.0) == NONE
    assert group.sync_answer("m2", 2) == (NONE, b"p1")
    assert group.heartbeat("m2", 2, 4.0) == NONE


def test_members_that_do_not_rejoin_are_dropped_at_the_deadline():
    group, _ = stable_pair()
    assert not group.try_complete_join(1.0 + REBALANCE_S - 0.1)
    assert group.try_complete_join(1.0 + REBALANCE_S)
    assert set(group.members) == {"m2"} and group.leader_id == "m2"
    assert group.heartbeat("m1", 2, 40.0) == UNKNOWN_MEMBER_ID


def test_wrong_generation_and_unknown_members_are_refused():
    group = Group("g")
    join(group)
    assert group.heartbeat("m1", 7, 1.0) == ILLEGAL_GENERATION
    assert group.heartbeat("nobody", 1, 1.0) == UNKNOWN_MEMBER_ID
    assert join(group, "nobody") == (UNKNOWN_MEMBER_ID, "nobody")
    assert group.sync("m1", 7, None, 1.0) == ILLEGAL_GENERATION


def test_a_silent_member_expires_and_the_group_rebalances():
    group, _ = stable_pair()
    join(group, "m1", now=2.0)
    group.sync("m1", 2, {}, 2.0)
    group.heartbeat("m1", 2, 2.0 + SESSION_S)
    assert group.expire(2.0 + SESSION_S + 0.5) == ["m2"]
    assert group.state is GroupState.PREPARING_REBALANCE


def test_leaving_rebalances_and_the_last_leaves_an_empty_group():
    group, _ = stable_pair()
    join(group, "m1", now=2.0)
    assert group.leave("m2", 3.0) == NONE
    assert group.state is GroupState.PREPARING_REBALANCE and group.members.keys() == {"m1"}
    assert group.leave("m1", 4.0) == NONE
    assert group.state is GroupState.EMPTY and not group.members


def test_no_common_protocol_is_inconsistent():
    group = Group("g")
    join(group)
    assert join(group, protocols=(("sticky", b""),))[0] == INCONSISTENT_GROUP_PROTOCOL


def test_commits_need_the_current_generation_once_the_group_has_members():
    group = Group("g")
    assert group.check_commit("", -1) == NONE
    join(group)
    assert group.check_commit("", -1) == UNKNOWN_MEMBER_ID
    assert group.check_commit("m1", 0) == ILLEGAL_GENERATION
    assert group.check_commit("m1", 1) == NONE


def test_coordinator_answers_concurrent_joins_and_syncs():
    coordinator = GroupCoordinator(initial_rebalance_delay_s=0.0)
    first = coordinator.join("g", "", 10_000, 10_000, "consumer", PROTOCOLS)
    assert first.error_code == NONE and first.generation == 1
    assert coordinator.sync("g", first.member_id, 1, {first.member_id: b"x"}) == (NONE, b"x")

    answers = {}

    def rejoin(name, member_id):
        answers[name] = coordinator.join("g", member_id, 10_000, 10_000, "consumer", PROTOCOLS)

    threads = [threading.Thread(target=rejoin, args=("new", "")),
               threading.Thread(target=rejoin, args=("old", first.member_id))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)
    assert answers["new"].generation == answers["old"].generation == 2

    synced = {}
    follower = threading.Thread(target=lambda: synced.update(follower=coordinator.sync(
        "g", answers["new"].member_id, 2, None)))
    follower.start()
    assert coordinator.sync("g", first.member_id, 2, {answers["new"].member_id: b"p1"}) == \
        (NONE, b"")
    follower.join(20)
    assert synced["follower"] == (NONE, b"p1")


def test_coordinator_bounds_the_session_timeout_and_wakes_waiters_on_stop():
    coordinator = GroupCoordinator(initial_rebalance_delay_s=0.0)
    assert coordinator.join("g", "", 10, 10, "consumer", PROTOCOLS).error_code == \
        INVALID_SESSION_TIMEOUT
    leader = coordinator.join("g", "", 10_000, 10_000, "consumer", PROTOCOLS)
    coordinator.sync("g", leader.member_id, 1, {})
    waiting = {}
    joiner = threading.Thread(target=lambda: waiting.update(answer=coordinator.join(
        "g", "", 10_000, 60_000, "consumer", PROTOCOLS)))
    joiner.start()
    coordinator.stop()
    joiner.join(20)
    assert waiting["answer"].error_code == COORDINATOR_NOT_AVAILABLE


def test_first_join_of_an_empty_group_waits_the_initial_delay_for_company():
    group = Group("g", initial_delay_s=3.0)
    new_id = ids()
    assert join(group, new_id=new_id) == (NONE, "m1")
    assert not group.answers and not group.try_complete_join(2.9)
    assert join(group, now=1.0, new_id=new_id) == (NONE, "m2")  # joins the same rebalance
    assert group.try_complete_join(3.0)
    assert group.answers["m1"].generation == group.answers["m2"].generation == 1
    # Later rebalances do not wait: every member rejoining completes it.
    group.sync("m1", 1, {}, 3.0)
    join(group, "m1", now=4.0)
    join(group, "m2", now=4.0)
    assert group.answers["m2"].generation == 2


def test_coordinator_answers_the_first_join_after_the_initial_delay():
    clock = [100.0]
    coordinator = GroupCoordinator(clock=lambda: clock[0], initial_rebalance_delay_s=3.0)
    answer = {}
    joiner = threading.Thread(target=lambda: answer.update(first=coordinator.join(
        "g", "", 10_000, 10_000, "consumer", PROTOCOLS)))
    joiner.start()
    joiner.join(0.3)
    assert joiner.is_alive()  # held by the delay
    clock[0] += 3.0
    joiner.join(WAIT_S)
    assert answer["first"].error_code == NONE and answer["first"].generation == 1
