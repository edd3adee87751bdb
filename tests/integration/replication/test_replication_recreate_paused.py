"""A follower paused across a topic's delete and re-create, on three real broker processes.

The follower (SIGSTOPped) misses three records produced to `d`, the delete of `d` and its
re-create with one new record. Thawed, it must catch up -- the old incarnation's batches reach
it as SKIPPED, not as bytes of the new one -- so that when the other follower is then SIGKILLed,
acks=all writes go on with the leader and the thawed follower as the majority, and `d` holds
exactly its own records. Once idle, no broker spins (a wedged follower and its leader each
burned about half a core fetching and answering empty).

With one replication group and with three (the partition's group led by another broker than
the metadata group, whichever the placement gives).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from common.kaska import Admin, Producer
from common.kaska.retry import RetryPolicy
from services.broker.replication.placement import group_of
from tests.integration.replication.cluster import FAST_ELECTIONS
from tests.integration.replication.test_replication_big_delete import wait_until
from tests.integration.replication.test_replication_groups import GROUPS, preferred_leaders_lead
from tests.integration.replication.workload import CLIENT_TIMEOUTS, RIDE_OUT_RETRY, read_back

pytestmark = [pytest.mark.integration]

TOPIC = "d"
OLD_RECORDS = [b"old-0", b"old-1", b"old-2"]
NEW_RECORDS = [b"new-0"]  # the new incarnation ends below the old records' offsets
AFTER_RECORDS = [b"after-%d" % k for k in range(5)]
IDLE_WINDOW_S = 3.0
IDLE_CPU_S_MAX = 0.6  # per broker over the window: a spinning pair burned ~1.5 each
ADMIN_RETRY = RetryPolicy(20, 0.05, 0.5)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def leader_of_topic(cluster, groups: int) -> int:
    if groups == 1:
        return cluster.leader_id()
    return cluster.group_leader(group_of(TOPIC, 0, groups)).leader_id


def send(cluster, values: list[bytes]) -> None:
    with Producer(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as producer:
        for value in values:
            producer.send_batch(TOPIC, 0, [value])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("groups", [1, GROUPS])
def test_a_follower_paused_across_a_recreate_catches_up_and_keeps_the_group_available(
        make_cluster, groups):
    cluster = make_cluster(groups=groups, extra_args=FAST_ELECTIONS)
    if groups > 1:
        preferred_leaders_lead(cluster)  # no hand-over moves the topic's leader meanwhile
    cluster.create_topic(TOPIC, 1)
    send(cluster, [b"first"])
    cluster.wait_caught_up(TOPIC, [0])
    leader = leader_of_topic(cluster, groups)
    paused, other = [i for i in cluster.ids if i != leader][:2]
    if groups > 1 and other == cluster.leader_id():
        paused, other = other, paused  # keep the metadata group's leader running
    cluster.pause(paused)
    send(cluster, OLD_RECORDS)
    with Admin(cluster.bootstrap_of([leader, other]), retry=ADMIN_RETRY,
               **CLIENT_TIMEOUTS) as admin:
        admin.delete_topic(TOPIC)
        admin.create_topic(TOPIC, 1)
    send(cluster, NEW_RECORDS)
    assert cluster.partition_offsets(leader, TOPIC)[0][0] == len(NEW_RECORDS), \
        "the scenario: the new incarnation ends below the old records' offsets"
    cluster.resume(paused)
    cluster.wait_caught_up(TOPIC, [0])  # every broker, the thawed one too

    cluster.kill(other, signal.SIGKILL)
    send(cluster, AFTER_RECORDS)  # acks=all on the leader and the thawed follower
    stored, _ = read_back(cluster.bootstrap, TOPIC, [0])
    assert [value for _, value in stored[0]] == NEW_RECORDS + AFTER_RECORDS

    live = [i for i in cluster.ids if i != other]
    wait_until(lambda: all(cluster.partition_offsets(i, TOPIC) == {
        0: (len(NEW_RECORDS + AFTER_RECORDS),) * 2} for i in live), "both live brokers hold d")
    before = {i: cpu_seconds(cluster.brokers[i].proc.pid) for i in live}
    time.sleep(IDLE_WINDOW_S)  # the window measured: nothing is asked of the brokers in it
    burned = {i: cpu_seconds(cluster.brokers[i].proc.pid) - before[i] for i in live}
    assert all(spent < IDLE_CPU_S_MAX for spent in burned.values()), \
        f"brokers busy while idle: {burned} CPU-s over {IDLE_WINDOW_S:g} s"
