"""Journal compaction with real broker processes (docs/replication.md "Compaction"): a follower is
SIGKILLed; while it is down, acks=all writers go on, a topic is created and another deleted,
and the leader compacts its journal past everything the follower holds. Restarted, the
follower is answered SNAPSHOT, installs it (its topics the snapshot's, the partition bytes
copied with SNAPSHOT_FETCH) and catches up: no acknowledged write is lost, and once every
broker stops, each one's bytes of every partition are identical.
"""

from __future__ import annotations

import re
import signal
import threading
import time

import pytest

from common.kaska import Admin
from common.kaska.retry import RetryPolicy
from services.broker.replication.journal import Journal
from services.broker.replication.node import REPLICATION_DIR
from services.broker.storage.log import Log
from tests.integration.replication.cluster import FAST_ELECTIONS, LEADER_TIMEOUT_S
from tests.integration.replication.test_replication_failover import reckon
from tests.integration.replication.workload import start_writers, stop_writers, wait_for_acks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = 8831
TOPIC = "replicated"  # reckon()'s topic
PARTITIONS = [0, 1]
WRITER_PARTITIONS = [0, 1, 0]
WRITER_PAUSE_S = 0.005
# Small, so that a few seconds of writes fill it: the leader keeps the entries of a follower
# lagging by less than half of it, and compacts past one further behind.
JOURNAL_ENTRIES_MAX = 200
COMPACTED = re.compile(r"journal compacted below (\d+)")
INSTALLED = re.compile(r"installed leader \d+'s snapshot \(entries below (\d+)")
COMPACTION_TIMEOUT_S = 60.0


def wait_for_line(cluster, i: int, pattern: re.Pattern, above: int, timeout_s: float) -> int:
    """Until broker i logs `pattern` with a number > `above`; that number."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [int(pattern.search(line).group(1)) for line in cluster.log_lines(i, pattern)]
        if found and max(found) > above:
            return max(found)
        assert time.monotonic() < deadline, \
            f"broker {i} did not log {pattern.pattern} above {above} in {timeout_s:g} s " \
            f"(found {found[-3:]})"
        time.sleep(0.1)


def admin(cluster, leader: int) -> Admin:
    return Admin(cluster.address(leader), retry=RetryPolicy(3, 0.1, 0.5),
                 request_timeout_s=15.0, connect_timeout_s=2.0)


@pytest.mark.timeout(240)
def test_follower_behind_the_leaders_snapshot_catches_up_byte_equal(make_cluster):
    started = time.monotonic()
    cluster = make_cluster(extra_args=(*FAST_ELECTIONS, "--journal-entries-max",
                                       str(JOURNAL_ENTRIES_MAX)))
    cluster.create_topic(TOPIC, len(PARTITIONS))
    cluster.create_topic("doomed", 1)
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, WRITER_PARTITIONS, SEED, stop, progress,
                            pause_s=WRITER_PAUSE_S)
    try:
        wait_for_acks(writers, progress, what="before the kill")
        leader = cluster.leader_id()
        follower = cluster.others(leader)[0]
        cluster.kill(follower, signal.SIGKILL)
        journal = Journal(cluster.brokers[follower].data_dir / REPLICATION_DIR)
        held = journal.end  # what the follower holds: the leader must compact past it
        journal.close()
        with admin(cluster, leader) as client:
            client.delete_topic("doomed")
            client.create_topic("born", 3)
        compacted = wait_for_line(cluster, leader, COMPACTED, held, COMPACTION_TIMEOUT_S)
        assert cluster.leader_id() == leader, "the test wants the same leader throughout"
        cluster.start_broker(follower)
        installed = wait_for_line(cluster, follower, INSTALLED, held, LEADER_TIMEOUT_S)
        wait_for_acks(writers, progress, more=20, what="after the follower's restart")
    finally:
        stop_writers(writers, stop)
    counters = reckon(cluster, writers)  # read back, catch up, stop, compare bytes
    for partition in PARTITIONS:
        stored = cluster.stored_partitions(TOPIC, partition)
        assert stored[follower] == stored[leader], \
            f"{TOPIC}/{partition}: follower {follower} and leader {leader} differ " \
            f"([{stored[follower].log_start_offset}, {stored[follower].log_end_offset}) vs " \
            f"[{stored[leader].log_start_offset}, {stored[leader].log_end_offset}))"
    for i in cluster.ids:
        with Log(cluster.brokers[i].data_dir) as log:
            topics = log.topics()
        assert "doomed" not in topics and topics.get("born") == 3, f"broker {i}: {topics}"
    print(f"\n[replication compaction] follower {follower} down from journal end {held}; "
          f"leader {leader} compacted below {compacted}; the follower installed a snapshot "
          f"below {installed}; {counters}; {time.monotonic() - started:.1f} s")
