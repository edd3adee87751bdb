"""A follower's data directory wiped under acks=all writers, on real
broker processes: SIGKILL, `rm -rf` of its directory, restart. It comes back as a new broker
incarnation, rejoins as a learner (it may have voted in an epoch it forgot), catches up, and
becomes a voter again -- then carries the cluster's majority alone with the leader while the
other follower is killed. Every acknowledged record is read back, and every broker's bytes of
[0, high watermark) are identical.

Randomness (batch sizes) is seeded: KASKA_REPLICATION_SEED replays.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest

from tests.integration.metrics_scrape import scrape
from tests.integration.replication.cluster import FAST_ELECTIONS
from tests.integration.replication.workload import (
    check_acknowledged,
    check_replicas_identical,
    read_back,
    start_writers,
    stop_writers,
    wait_for_acks,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("KASKA_REPLICATION_SEED", "7321"))
TOPIC = "rejoined"
PARTITIONS = [0, 1]
WRITER_PAUSE_S = 0.005
BACKLOG_ACKS = 20  # per writer, while the wiped broker is down: something to catch up on
PROMOTION_TIMEOUT_S = 30.0
LEARNER_LINE = "a learner until it has caught up"
PROMOTED_LINE = "caught up with the cluster; a voter"
INCARNATION_LINE = "came back as another incarnation"


def voter_gauge(cluster, broker: int) -> float | None:
    try:
        _text, samples = scrape(cluster.metrics_ports[broker])
    except OSError:
        return None
    return samples.get(("kaska_replication_voter", (("group", "0"),)))


@pytest.mark.timeout(180)
def test_a_wiped_follower_rejoins_as_a_learner_and_nothing_acknowledged_is_lost(make_cluster):
    started = time.monotonic()
    cluster = make_cluster(extra_args=FAST_ELECTIONS)
    for i in cluster.ids:  # a cluster formed from empty directories: every broker votes
        assert voter_gauge(cluster, i) == 1.0, f"broker {i} is no voter after formation"
    cluster.create_topic(TOPIC, len(PARTITIONS))
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, [0, 1, 0], SEED, stop, progress,
                            pause_s=WRITER_PAUSE_S)
    try:
        wait_for_acks(writers, progress, more=5, what="before the wipe")
        leader = cluster.leader().leader_id
        wiped, other = cluster.others(leader)
        cluster.kill(wiped, signal.SIGKILL)
        shutil.rmtree(cluster.brokers[wiped].data_dir)
        wait_for_acks(writers, progress, more=BACKLOG_ACKS, what="while the wiped one is down")
        restarted_at = time.monotonic()
        cluster.start_broker(wiped)
        assert cluster.log_lines(wiped, LEARNER_LINE), "the wiped broker did not rejoin as " \
            "a learner"
        deadline = restarted_at + PROMOTION_TIMEOUT_S
        while not (voter_gauge(cluster, wiped) == 1.0
                   and cluster.log_lines(wiped, PROMOTED_LINE)):
            assert time.monotonic() < deadline, \
                f"broker {wiped} not a voter {PROMOTION_TIMEOUT_S:g} s after its restart"
            time.sleep(0.05)
        promoted_s = time.monotonic() - restarted_at
        wait_for_acks(writers, progress, more=5, what="after the promotion")
        # A voter that counts: with the other follower gone, the leader's majority is the
        # rejoined broker (acks=all needs two of three).
        cluster.kill(other, signal.SIGKILL)
        wait_for_acks(writers, progress, more=5,
                      what=f"with broker {other} killed: {wiped} must carry the majority")
        cluster.start_broker(other)
        wait_for_acks(writers, progress, more=3, what="all three back")
    finally:
        stop_writers(writers, stop)
    unexpected = [error for writer in writers for error in writer.tally.unexpected]
    assert not unexpected, f"non-retriable errors: {unexpected}"
    stored, high_watermarks = read_back(cluster.bootstrap, TOPIC, PARTITIONS)
    counts = check_acknowledged(stored, {writer.name: writer.tally for writer in writers})
    cluster.wait_caught_up(TOPIC, PARTITIONS)
    incarnation_lines = {i: len(cluster.log_lines(i, INCARNATION_LINE)) for i in cluster.ids}
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), f"exit codes on SIGTERM: {codes}"
    compared = check_replicas_identical(cluster, TOPIC, PARTITIONS, high_watermarks)
    assert not cluster.safety_lines(), cluster.safety_lines()
    assert counts.acked_batches > 0 and compared > 0
    assert incarnation_lines[leader] >= 1, \
        f"leader {leader} never saw broker {wiped}'s new incarnation: {incarnation_lines}"
    print(f"\n[replication wipe] seed {SEED}: broker {wiped} wiped (leader {leader}); a voter "
          f"{promoted_s:.2f} s after its restart; {counts.acked_batches} batches "
          f"({counts.acked_records} records) acknowledged, all read back; high watermarks "
          f"{high_watermarks}; {compared} bytes identical per broker; "
          f"{time.monotonic() - started:.1f} s")
