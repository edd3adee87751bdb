"""Deleting a big topic costs the cluster nothing it would notice.

Three brokers; topic `big` whose partitions each hold an extra multi-GB sparse file on every
broker (what the 20M-row run's 14 GB topic looked like to `rmtree`), while a producer writes to
another topic with acks=all. The delete is committed and applied on every broker (the leader
applies it inside a follower's fetch, followers on their replication loop; the files go on the
storage reaper's thread): no election may follow -- every broker keeps the epoch and the
leader it had -- and every produce is acknowledged. The longest produce stall is printed, not
asserted (a timing on a shared machine); the scenario is checked: the files existed, the
delete landed while the producer was writing, and the files are gone on every broker after.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from common.kaska import Admin, Producer
from common.kaska.errors import KaskaError
from tests.integration.replication.workload import CLIENT_TIMEOUTS, RIDE_OUT_RETRY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIG = "big"
OTHER = "other"
BIG_PARTITIONS = 8
SPARSE_BYTES_PER_PARTITION = 2 << 30
ACKS_BEFORE_DELETE = 20
ACKS_AFTER_DELETE = 20
WAIT_S = 60.0


def wait_until(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.05)


class StallingProducer(threading.Thread):
    """acks=all, one small batch after another; every produce's duration is kept."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True, name="producer")
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.durations_s: list[float] = []
        self.error: KaskaError | None = None

    def run(self) -> None:
        try:
            with Producer(self.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as producer:
                while not self.stop.is_set():
                    started = time.monotonic()
                    producer.send_msg(OTHER, b"v" * 200)
                    self.durations_s.append(time.monotonic() - started)
        except KaskaError as exc:  # handed to the test thread, which fails on it
            self.error = exc


@pytest.mark.timeout(240)
def test_deleting_a_multi_gb_topic_elects_nobody_and_writes_go_on(make_cluster):
    cluster = make_cluster()
    cluster.create_topic(BIG, BIG_PARTITIONS)
    cluster.create_topic(OTHER, 1)
    before = cluster.leader()
    fillers = []
    for i in cluster.ids:
        wait_until(lambda i=i: (cluster.brokers[i].data_dir / BIG / "topic.json").exists(),
                   f"broker {i} holds {BIG}")
        for p in range(BIG_PARTITIONS):
            filler = cluster.brokers[i].data_dir / BIG / str(p) / "filler.bin"
            with open(filler, "wb") as out:
                out.truncate(SPARSE_BYTES_PER_PARTITION)
            fillers.append(filler)
    apparent_gb = sum(os.stat(f).st_size for f in fillers) / 2**30
    producer = StallingProducer(cluster.bootstrap)
    producer.start()
    try:
        wait_until(lambda: len(producer.durations_s) >= ACKS_BEFORE_DELETE or producer.error,
                   "the producer's first acknowledgements")
        acked_at_delete = len(producer.durations_s)
        with Admin(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS) as admin:
            admin.delete_topic(BIG)
        wait_until(lambda: not any(f.exists() for f in fillers), "the files gone everywhere")
        wait_until(lambda: len(producer.durations_s) >= acked_at_delete + ACKS_AFTER_DELETE
                   or producer.error, "acknowledgements after the delete")
    finally:
        producer.stop.set()
        producer.join(WAIT_S)
    assert producer.error is None, f"the producer failed: {producer.error!r}"
    after = cluster.leader()
    assert (after.leader_id, after.epoch) == (before.leader_id, before.epoch), \
        f"an election followed the delete: {before} before, {after} after"
    for i in cluster.ids:
        response = cluster.metadata(i)
        assert response is not None and BIG not in response.topics, f"broker {i} still has {BIG}"
    stall_s = max(producer.durations_s[acked_at_delete:])
    print(f"\n[big delete] {apparent_gb:.0f} GB apparent ({BIG_PARTITIONS} partitions x "
          f"{len(cluster.ids)} brokers, sparse); leader {before.leader_id} epoch {before.epoch} "
          f"kept; {len(producer.durations_s)} produces acknowledged; longest from the delete "
          f"on {stall_s:.3f} s")
