"""A SIGTERMed leader's hand-over when its target cannot take it: real broker
processes, the target frozen with SIGSTOP. The leader gives up once the target stays silent
(`transfer_silence_s`), stops anyway (exit 0), and the cluster elects a leader once the frozen
broker is thawed; every acknowledged record is read back exactly once, and the replicas' bytes
agree (the SIGTERM of a leader whose target takes over is in test_replication_failover.py)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.integration.replication.cluster import FAST_ELECTIONS
from tests.integration.replication.test_replication_failover import (
    PARTITIONS,
    SEED,
    TOPIC,
    WRITER_PARTITIONS,
    reckon,
)
from tests.integration.replication.workload import start_writers, stop_writers, wait_for_acks

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(180)
def test_a_leader_whose_target_is_frozen_gives_up_stops_and_loses_nothing(make_cluster):
    cluster = make_cluster(extra_args=FAST_ELECTIONS)
    cluster.create_topic(TOPIC, len(PARTITIONS))
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, WRITER_PARTITIONS, SEED, stop, progress,
                            pause_s=0.005)
    try:
        wait_for_acks(writers, progress, more=20, what="before the hand-over")
    finally:
        stop_writers(writers, stop)
    # Both followers hold everything, so the leader's pick is its tie-break: the lower id.
    cluster.wait_caught_up(TOPIC, PARTITIONS)
    old = cluster.leader()
    target = min(cluster.others(old.leader_id))
    cluster.pause(target)
    asked_at = time.monotonic()
    assert cluster.kill(old.leader_id, signal.SIGTERM) == 0
    stop_took_s = time.monotonic() - asked_at
    # The scenario: it tried to hand over to the frozen broker and gave up on its silence.
    tried = cluster.log_lines(old.leader_id, rf"handing leadership of epoch {old.epoch} to "
                                             rf"broker {target}\b")
    gave_up = cluster.log_lines(old.leader_id, rf"broker {target} did not take leadership "
                                               "over")
    assert tried and gave_up, cluster.log_lines(old.leader_id, "leadership")
    assert not cluster.log_lines(old.leader_id, "handed leadership of epoch")
    cluster.resume(target)
    new = cluster.leader(min_epoch=old.epoch + 1)
    assert new.leader_id != old.leader_id
    cluster.start_broker(old.leader_id)
    cluster.leader(min_epoch=new.epoch)
    counters = reckon(cluster, writers)
    print(f"\n[hand-over to a frozen target] leader {old.leader_id} (epoch {old.epoch}) gave "
          f"up on broker {target} and stopped in {stop_took_s:.2f} s; epoch {new.epoch} led "
          f"by {new.leader_id}; {counters}")
