"""The Jepsen case: a network partition isolates the leader from both followers while a
client still reaches it directly.

Every broker reaches every peer through its own proxy (`peer_via_proxy=True`); the test cuts
the proxies to and from the leader. A direct writer keeps producing (acks=all) to the old
leader over one connection of its own (no metadata, no retries, so each answer is that
broker's), and a second writer produces through the two other brokers. Checked:

- the isolated leader acknowledges no record first sent after the cut began, and it learns
  that it no longer leads (its METADATA stops naming itself);
- the majority elects a leader of a newer epoch and keeps acknowledging writes during the cut;
- after the heal, all three follow one leader; the old leader dropped what it took during the
  cut (none of those records is ever readable) and ends with bytes equal to the new leader's;
- no acknowledged record is lost, none is stored twice (`workload.check_acknowledged`).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.integration.replication.cluster import FAST_ELECTIONS
from tests.integration.replication.workload import (
    DirectWriter,
    check_acknowledged,
    check_replicas_identical,
    read_back,
    start_writers,
    stop_writers,
    wait_for_acks,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("KASKA_REPLICATION_SEED", "7321"))
TOPIC = "partitioned"
PARTITION = 0
DIRECT_WRITERS = 2
SENDS_DURING_CUT_MIN = 3
# While cut, the isolated broker's election timers run out again and again: each try reaches
# a cut proxy, which refuses it; the cut lasts until this many more were refused after it
# stepped down.
REFUSED_TRIES_AFTER_STEP_DOWN_MIN = 4
MAJORITY_ACKS_DURING_CUT_MIN = 5
WAIT_S = 40.0
WRITER_PAUSE_S = 0.005


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.05)


@pytest.mark.timeout(180)
def test_isolated_leader_acknowledges_nothing_and_rejoins_truncated(make_cluster):
    started = time.monotonic()
    cluster = make_cluster(peer_via_proxy=True, extra_args=FAST_ELECTIONS)
    cluster.create_topic(TOPIC, 1)
    old = cluster.leader()
    isolated = old.leader_id
    majority = cluster.others(isolated)
    stop_direct, stop_majority = threading.Event(), threading.Event()
    progress = threading.Condition()
    directs = [DirectWriter(f"direct{k}", cluster.brokers[isolated].host_port, TOPIC,
                            PARTITION, stop_direct, SEED + 10 + k) for k in range(DIRECT_WRITERS)]
    for direct in directs:
        direct.start()
    majority_writers = start_writers(cluster.bootstrap_of(majority), TOPIC, [PARTITION],
                                     SEED + 1, stop_majority, progress, prefix="majority",
                                     pause_s=WRITER_PAUSE_S)
    try:
        wait_until(lambda: all(sum(s.base_offset is not None for s in direct.snapshot()) >= 3
                               for direct in directs),
                   WAIT_S, "the direct writers' first acknowledgements")
        wait_for_acks(majority_writers, progress, more=2, what="before the cut")
        assert cluster.leader() == old, "leadership moved before the cut"

        cut = [pair for pair in cluster.proxies if isolated in pair]
        for pair in cut:
            cluster.proxies[pair].cut()
        cut_at = time.monotonic()
        for i in cluster.ids:
            cluster.brokers[i].note(f"cut broker {isolated} off from {majority}")

        new = cluster.leader(among=majority, min_epoch=old.epoch + 1)
        wait_for_acks(majority_writers, progress, more=MAJORITY_ACKS_DURING_CUT_MIN,
                      what="the majority during the cut")
        wait_until(lambda: sum(s.started >= cut_at for direct in directs
                               for s in direct.snapshot()) >= SENDS_DURING_CUT_MIN,
                   WAIT_S, "direct sends answered during the cut")

        def isolated_knows_it_does_not_lead() -> bool:
            view = cluster.view(isolated)
            return view is not None and view.leader_id != isolated

        wait_until(isolated_knows_it_does_not_lead, WAIT_S,
                   f"the isolated broker {isolated} stepping down")
        # Stay cut while the isolated broker's election timers run out, again and again.
        refused_at_step_down = sum(cluster.proxies[pair].refused for pair in cut)
        wait_until(lambda: sum(cluster.proxies[pair].refused for pair in cut)
                   >= refused_at_step_down + REFUSED_TRIES_AFTER_STEP_DOWN_MIN, WAIT_S,
                   f"the isolated broker {isolated} trying its peers again and again")

        heal_at = time.monotonic()
        for pair in cut:
            cluster.proxies[pair].heal()
        for i in cluster.ids:
            cluster.brokers[i].note(f"healed broker {isolated}")
        rejoined = cluster.leader(min_epoch=new.epoch)  # all three follow one leader
        wait_for_acks(majority_writers, progress, more=3, what="after the heal")
        # The direct writers also try the rejoined (following) broker.
        wait_until(lambda: all(any(s.started >= heal_at for s in direct.snapshot())
                               for direct in directs),
                   WAIT_S, "direct sends answered after the heal")
    finally:
        stop_direct.set()
        stop_writers(majority_writers, stop_majority)
        for direct in directs:
            direct.join(60)
    assert not [direct.crash for direct in directs if direct.crash]
    unexpected = [error for writer in majority_writers for error in writer.tally.unexpected]
    assert not unexpected, f"non-retriable errors: {unexpected}"

    sends = [send for direct in directs for send in direct.snapshot()]
    after_cut = [send for send in sends if send.started >= cut_at]
    wrongly_acked = [(send.values[0][:20], round(send.started - cut_at, 2), send.base_offset)
                     for send in after_cut if send.base_offset is not None]
    assert not wrongly_acked, \
        f"the isolated leader {isolated} acknowledged records first sent after the cut " \
        f"(record, seconds after the cut, offset): {wrongly_acked}"
    assert len(after_cut) >= SENDS_DURING_CUT_MIN
    majority_acks_in_cut = sum(cut_at < ack.acked_at < heal_at
                               for writer in majority_writers for ack in writer.tally.acks)
    assert majority_acks_in_cut >= MAJORITY_ACKS_DURING_CUT_MIN

    stored, high_watermarks = read_back(cluster.bootstrap, TOPIC, [PARTITION])
    tallies = {writer.name: writer.tally for writer in majority_writers}
    for direct in directs:
        tallies[direct.name] = direct.tally()
    counts = check_acknowledged(stored, tallies)
    readable = {value for _, value in stored[PARTITION]}
    resurrected = [send.values[0][:20] for send in after_cut
                   if any(value in readable for value in send.values)]
    assert not resurrected, \
        f"records the isolated leader took during the cut are readable: {resurrected}"

    cluster.wait_caught_up(TOPIC, [PARTITION])  # the rejoined broker fetched everything
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), f"exit codes on SIGTERM: {codes}"
    compared = check_replicas_identical(cluster, TOPIC, [PARTITION], high_watermarks)
    stored_files = cluster.stored_partitions(TOPIC, PARTITION)
    old_side, new_side = stored_files[isolated], stored_files[rejoined.leader_id]
    assert old_side == new_side, \
        f"the old leader {isolated} holds [{old_side.log_start_offset}, " \
        f"{old_side.log_end_offset}), the leader {rejoined.leader_id} " \
        f"[{new_side.log_start_offset}, {new_side.log_end_offset}); bytes equal: " \
        f"{old_side.data == new_side.data}"
    truncations = cluster.recovery_lines(isolated)
    assert not cluster.safety_lines(), cluster.safety_lines()
    isolated_epochs = cluster.log_lines(isolated, r"candidate of epoch")
    refused = sum(cluster.proxies[pair].refused for pair in cut)
    print(f"\n[replication partition] leader {isolated}@{old.epoch} cut off for "
          f"{heal_at - cut_at:.1f} s; majority leader {new.leader_id}@{new.epoch}; after heal "
          f"{rejoined.leader_id}@{rejoined.epoch}; the isolated broker stood as candidate "
          f"{len(isolated_epochs)} time(s); direct sends during/after the cut: "
          f"{len(after_cut)}, acknowledged: 0 (errors e.g. {after_cut[0].error!r}); "
          f"direct acks before the cut: {sum(len(tallies[d.name].acks) for d in directs)}; "
          f"majority acks "
          f"during the cut: {majority_acks_in_cut}; connections refused by the cut proxies: "
          f"{refused}; truncation lines on the old leader: {len(truncations)} "
          f"({truncations[-1][-120:] if truncations else ''}); acked batches "
          f"{counts.acked_batches}, records {counts.acked_records}, stored "
          f"{counts.stored_records}, unacked-but-stored {counts.unacked_stored}; ERROR log "
          f"lines {cluster.error_lines()}; hw "
          f"{high_watermarks}; bytes compared per broker {compared}; "
          f"{time.monotonic() - started:.1f} s")
