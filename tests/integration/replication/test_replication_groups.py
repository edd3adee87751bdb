"""Leadership per partition: three brokers, three replication groups, real processes.

- Each broker comes to lead one group (its preferred one), so a topic's partitions have three
  leaders. A broker that leads one group and follows the two others is SIGKILLed, or SIGSTOPped,
  while acks=all writers produce to every partition: its group elects a successor and its
  partitions go on; the two other groups keep their leader and epoch, and their partitions'
  writers are acknowledged all the while. The broker comes back (restarted, or resumed) and is
  handed its group again. Then every acknowledged record is read back exactly once where it was
  acknowledged, and every broker holds the same bytes of every partition (workload.py).
- A network partition cuts the broker leading group 1 off from its peers: only group 1 moves,
  and the broker gets it back after the heal.
- A topic deleted and created again with another partition count: every group closes the old
  incarnation and opens the new one; nothing of the old one is readable, and each group's
  directory holds its own partitions only.
"""

from __future__ import annotations

import threading

import pytest

from common.kaska import Admin, Producer
from common.kaska.retry import RetryPolicy
from services.broker.replication.placement import group_directory, group_of, preferred_leader
from tests.integration.replication.cluster import FAST_ELECTIONS
from tests.integration.replication.test_replication_big_delete import wait_until
from tests.integration.replication.workload import (
    CLIENT_TIMEOUTS,
    RIDE_OUT_RETRY,
    check_acknowledged,
    check_replicas_identical,
    read_back,
    start_writers,
    stop_writers,
    wait_for_acks,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = 3
TOPIC = "spread"
PARTITIONS = list(range(6))  # two partitions in each group
WRITER_PAUSE_S = 0.005
ACKS_WHILE_DOWN = 5  # per writer of the groups that kept their leader
SEED = 2424


def preferred_leaders_lead(cluster) -> dict[int, int]:
    """Wait until every group is led by its preferred broker; {group: epoch}."""
    epochs = {}
    for group in range(GROUPS):
        preferred = preferred_leader(group, cluster.ids)
        wait_until(lambda g=group, p=preferred: cluster.group_leader(g).leader_id == p,
                   f"broker {preferred} leads group {group}")
        epochs[group] = cluster.group_leader(group).epoch
    return epochs


def assert_groups_kept(cluster, epochs: dict[int, int], moved_group: int, among,
                       why: str) -> None:
    """Every group but `moved_group` still led by its preferred broker, at the same epoch."""
    for group in set(range(GROUPS)) - {moved_group}:
        kept = cluster.group_leader(group, among=among)
        assert (kept.leader_id, kept.epoch) == (preferred_leader(group, cluster.ids),
                                                epochs[group]), \
            f"group {group} changed leader or epoch {why}"


def reckon(cluster, writers, stop) -> None:
    """Stop the writers; every acknowledged record read back once where it was acknowledged,
    every broker stopped cleanly and holding the same bytes, no safety line logged."""
    stop_writers(writers, stop)
    unexpected = [error for writer in writers for error in writer.tally.unexpected]
    assert not unexpected, f"non-retriable errors: {unexpected}"
    stored, high_watermarks = read_back(cluster.bootstrap, TOPIC, PARTITIONS)
    counts = check_acknowledged(stored, {w.name: w.tally for w in writers})
    cluster.wait_caught_up(TOPIC, PARTITIONS)
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), f"exit codes on SIGTERM: {codes}"
    compared = check_replicas_identical(cluster, TOPIC, PARTITIONS, high_watermarks)
    assert counts.acked_records > 0 and compared > 0
    assert not cluster.safety_lines(), cluster.safety_lines()
    print(f"{counts.acked_batches} batches acknowledged, {counts.stored_records} records "
          f"stored, {compared} bytes per broker compared")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_a_fault_moves_only_its_brokers_group_and_the_group_comes_back(make_cluster, fault):
    cluster = make_cluster(groups=GROUPS, extra_args=FAST_ELECTIONS)
    epochs = preferred_leaders_lead(cluster)
    cluster.create_topic(TOPIC, len(PARTITIONS))
    groups_of = {p: group_of(TOPIC, p, GROUPS) for p in PARTITIONS}
    assert set(groups_of.values()) == set(range(GROUPS))
    # The victim leads a data group and follows the metadata group and the other data group.
    victim_group = 1
    victim = preferred_leader(victim_group, cluster.ids)
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, PARTITIONS, SEED, stop, progress,
                            pause_s=WRITER_PAUSE_S)
    hit = [w for w in writers if groups_of[w.tally.partition] == victim_group]
    spared = [w for w in writers if groups_of[w.tally.partition] != victim_group]
    try:
        wait_for_acks(writers, progress, more=3, what="before the fault")
        in_flight = {w.name: len(w.tally.acks) for w in writers}
        if fault == "sigkill":
            cluster.kill(victim)
        else:
            cluster.pause(victim)
        others = cluster.others(victim)
        # The spared groups' writers go on while the victim is down, their leaders untouched.
        wait_for_acks(spared, progress, more=ACKS_WHILE_DOWN, what=f"while broker {victim} "
                      f"is down ({fault}), partitions of the groups it did not lead")
        successor = cluster.group_leader(victim_group, among=others,
                                         min_epoch=epochs[victim_group] + 1)
        wait_for_acks(hit, progress, more=3, what=f"group {victim_group}'s partitions after "
                      f"broker {successor.leader_id} took over")
        assert_groups_kept(cluster, epochs, victim_group, others,
                           f"when broker {victim} went down")
        assert all(len(w.tally.acks) > in_flight[w.name] for w in writers)
        if fault == "sigkill":
            cluster.start_broker(victim)
        else:
            cluster.resume(victim)
        back = cluster.group_leader(victim_group, timeout_s=60.0,
                                    min_epoch=successor.epoch + 1)
        wait_until(lambda: cluster.group_leader(victim_group).leader_id == victim,
                   f"broker {victim} leads group {victim_group} again (it led {back})",
                   timeout_s=60.0)
        wait_for_acks(writers, progress, more=3, what=f"after broker {victim} came back")
    except BaseException:
        stop_writers(writers, stop)
        raise
    reckon(cluster, writers, stop)


@pytest.mark.timeout(180)
def test_a_topic_recreated_with_other_partitions_is_the_new_one_in_every_group(make_cluster):
    cluster = make_cluster(groups=GROUPS, extra_args=FAST_ELECTIONS)
    preferred_leaders_lead(cluster)
    name = "again"
    cluster.create_topic(name, 6)
    with Producer(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as producer:
        for p in range(6):
            producer.send_batch(name, p, [b"old-%d" % p] * 3)
    with Admin(cluster.bootstrap, retry=RetryPolicy(20, 0.05, 0.5), **CLIENT_TIMEOUTS) as admin:
        admin.delete_topic(name)
        admin.create_topic(name, 2)
        assert admin.topics()[name] == 2
    with Producer(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as producer:
        for p in range(2):
            producer.send_batch(name, p, [b"new-%d" % p])
    stored, high_watermarks = read_back(cluster.bootstrap, name, [0, 1])
    assert {p: [value for _, value in records] for p, records in stored.items()} == {
        0: [b"new-0"], 1: [b"new-1"]}
    cluster.wait_caught_up(name, [0, 1])
    cluster.stop_all()
    check_replicas_identical(cluster, name, [0, 1], high_watermarks)
    for i in cluster.ids:
        for group in range(GROUPS):
            topic_dir = group_directory(cluster.brokers[i].data_dir, group) / name
            held = sorted(int(p.name) for p in topic_dir.iterdir() if p.is_dir()) \
                if topic_dir.exists() else []
            assert held == [p for p in (0, 1) if group_of(name, p, GROUPS) == group], \
                f"broker {i} group {group} holds partitions {held} of {name}"


@pytest.mark.timeout(300)
def test_a_broker_cut_off_loses_only_its_group_and_gets_it_back_after_the_heal(make_cluster):
    """A network partition: the broker leading group 1 (a follower of groups 0 and 2) is cut
    off from its peers, for every group at once (its peer links go through proxies). Group 1
    elects among the majority; groups 0 and 2 keep their leaders and epochs, their partitions
    go on, and the cut-off follower disturbs nobody (pre-votes). Healed, it catches up and is
    handed group 1 again; nothing acknowledged is lost or doubled."""
    cluster = make_cluster(groups=GROUPS, peer_via_proxy=True, extra_args=FAST_ELECTIONS)
    epochs = preferred_leaders_lead(cluster)
    cluster.create_topic(TOPIC, len(PARTITIONS))
    groups_of = {p: group_of(TOPIC, p, GROUPS) for p in PARTITIONS}
    isolated_group = 1
    isolated = preferred_leader(isolated_group, cluster.ids)
    majority = cluster.others(isolated)
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap_of(majority), TOPIC, PARTITIONS, SEED + 7, stop,
                            progress, pause_s=WRITER_PAUSE_S)
    spared = [w for w in writers if groups_of[w.tally.partition] != isolated_group]
    try:
        wait_for_acks(writers, progress, more=3, what="before the cut")
        cut = [pair for pair in cluster.proxies if isolated in pair]
        for pair in cut:
            cluster.proxies[pair].cut()
        wait_for_acks(spared, progress, more=ACKS_WHILE_DOWN,
                      what=f"groups broker {isolated} does not lead, while it is cut off")
        successor = cluster.group_leader(isolated_group, among=majority,
                                         min_epoch=epochs[isolated_group] + 1)
        wait_for_acks(writers, progress, more=3, what=f"every partition during the cut "
                      f"(group {isolated_group} now led by {successor.leader_id})")
        assert_groups_kept(cluster, epochs, isolated_group, majority,
                           f"while broker {isolated} was cut off")
        for pair in cut:
            cluster.proxies[pair].heal()
        wait_until(lambda: cluster.group_leader(isolated_group).leader_id == isolated,
                   f"broker {isolated} leads group {isolated_group} again after the heal",
                   timeout_s=60.0)
        wait_for_acks(writers, progress, more=3, what="after the heal")
    except BaseException:
        stop_writers(writers, stop)
        raise
    reckon(cluster, writers, stop)
