"""Leader and follower faults under acks=all writers, in the shape of Kafka's
`replication_test`: real broker processes, a three-broker cluster, five rounds of the same
fault on whoever leads, then the reckoning.

Faults on the leader (one test each): SIGKILL, SIGTERM, and SIGSTOP...SIGCONT (the paused
leader: the others elect a successor and take writes while it sleeps; resumed, it must not
acknowledge what it can no longer commit, and must follow). A killed broker is restarted on
its data directory and port before the next round, so two brokers are always up.

And a follower SIGKILLed again and again within a second of each restart, while it catches up.

After the rounds: every acknowledged record is read back through the bootstrap list exactly
once, where it was acknowledged, in acknowledgement order, and nothing is stored twice (see
`workload.py`); then every broker is stopped and each one's bytes of [0, high watermark) of
every partition must be identical.

Randomness (pauses between faults, batch sizes) is seeded: KASKA_REPLICATION_SEED replays.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from common.kaska import Producer
from tests.integration.replication.cluster import FAST_ELECTIONS
from tests.integration.replication.workload import (
    CLIENT_TIMEOUTS,
    RIDE_OUT_RETRY,
    AckedWriter,
    batch_values,
    check_acknowledged,
    check_replicas_identical,
    direct_send_in_background,
    read_back,
    start_writers,
    stop_writers,
    wait_for_acks,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("KASKA_REPLICATION_SEED", "7321"))
TOPIC = "replicated"
PARTITIONS = [0, 1]
WRITER_PARTITIONS = [0, 1, 0]  # two producers interleave on partition 0
ROUNDS = 5
FOLLOWER_KILLS = 5
PROBES_PER_PAUSE = 3
DIRECT_SENDS_PER_PAUSE = 2  # produce requests queued at the paused leader, answered on SIGCONT
WRITER_PAUSE_S = 0.005  # between a writer's batches: small data, a machine not saturated
FOLLOWER_LAG_BATCHES = 10  # per writer, while the follower is down
SETTLE_S = 2.0  # writers stopped: followers fetch the last batches before the brokers stop
FAULTS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigstop": signal.SIGSTOP}


def reckon(cluster, writers: list[AckedWriter], extra_tallies: dict | None = None,
           never_readable: list[bytes] = ()) -> dict:
    """Read back, check, stop every broker, compare their bytes; counters for the report."""
    unexpected = [error for writer in writers for error in writer.tally.unexpected]
    assert not unexpected, f"non-retriable errors: {unexpected}"
    stored, high_watermarks = read_back(cluster.bootstrap, TOPIC, PARTITIONS)
    tallies = {writer.name: writer.tally for writer in writers} | (extra_tallies or {})
    counts = check_acknowledged(stored, tallies)
    readable = {value for records in stored.values() for _, value in records}
    resurrected = [value[:30] for value in never_readable if value in readable]
    assert not resurrected, f"records a deposed leader took are readable: {resurrected}"
    time.sleep(SETTLE_S)
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), f"exit codes on SIGTERM: {codes}"
    compared = check_replicas_identical(cluster, TOPIC, PARTITIONS, high_watermarks)
    assert counts.acked_batches > 0 and counts.stored_records > 0 and compared > 0
    assert not cluster.safety_lines(), cluster.safety_lines()
    return {"acked_batches": counts.acked_batches, "acked_records": counts.acked_records,
            "stored_records": counts.stored_records,
            "unacked_but_stored": counts.unacked_stored,
            "failed_sends": sum(writer.tally.failures for writer in writers),
            "high_watermarks": high_watermarks, "bytes_compared_per_broker": compared,
            "error_log_lines": cluster.error_lines()}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_leader_fault_rounds_lose_and_double_nothing(make_cluster, fault):
    seed = SEED + list(FAULTS).index(fault)
    rng = random.Random(seed)
    started = time.monotonic()
    cluster = make_cluster(extra_args=FAST_ELECTIONS)
    cluster.create_topic(TOPIC, len(PARTITIONS))
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, WRITER_PARTITIONS, seed, stop, progress,
                            pause_s=WRITER_PAUSE_S)
    probes: dict = {}
    queued_at_paused = []  # DirectSend of requests sent to the leader while it was stopped
    leaders = []
    try:
        wait_for_acks(writers, progress, what="before the first fault")
        for round_ in range(ROUNDS):
            time.sleep(rng.uniform(0.0, 0.3))  # a random moment in the produce stream
            old = cluster.leader()
            leaders.append((old.leader_id, old.epoch))
            if fault == "sigstop":
                cluster.pause(old.leader_id)
            else:
                code = cluster.kill(old.leader_id, FAULTS[fault])
                if fault == "sigterm":
                    assert code == 0, f"round {round_}: SIGTERM exit code {code}"
            others = cluster.others(old.leader_id)
            new = cluster.leader(among=others, min_epoch=old.epoch + 1)
            if fault == "sigstop":
                # The majority takes writes while the old leader sleeps.
                probe = AckedWriter(f"probe{round_}", cluster.bootstrap_of(others), TOPIC,
                                    round_ % len(PARTITIONS), seed + 100 + round_, stop,
                                    progress)
                with Producer(probe.bootstrap, retry=RIDE_OUT_RETRY,
                              **CLIENT_TIMEOUTS) as producer:
                    for _ in range(PROBES_PER_PAUSE):
                        assert probe.send_one(producer), \
                            f"round {round_}: the majority {others} (leader {new.leader_id}) " \
                            f"did not acknowledge a write while {old.leader_id} was paused: " \
                            f"{probe.tally.last_failure}"
                probes[probe.name] = probe.tally
                # Requests the sleeping leader will find in its socket when it wakes up.
                queued = [direct_send_in_background(
                    cluster.brokers[old.leader_id].host_port, TOPIC, k % len(PARTITIONS),
                    batch_values(f"paused{round_}", 0, k, rng))
                    for k in range(DIRECT_SENDS_PER_PAUSE)]
                time.sleep(0.3)  # connected (the kernel accepts for it) and sent
                cluster.resume(old.leader_id)
                for send, thread in queued:
                    thread.join(60)
                    assert not thread.is_alive()
                    assert send.base_offset is None, \
                        f"round {round_}: the deposed leader {old.leader_id} (epoch " \
                        f"{old.epoch}) acknowledged a produce sent to it while it was " \
                        f"paused and {new.leader_id} led epoch {new.epoch}, at offset " \
                        f"{send.base_offset}"
                    queued_at_paused.append(send)
            else:
                cluster.start_broker(old.leader_id)
            # Everyone, the returned broker included, follows one leader of a newer epoch.
            cluster.leader(min_epoch=new.epoch)
            wait_for_acks(writers, progress, what=f"{fault} round {round_}")
    finally:
        stop_writers(writers, stop)
    counters = reckon(cluster, writers, probes,
                      [value for send in queued_at_paused for value in send.values])
    recovered = {i: len(cluster.recovery_lines(i)) for i in cluster.ids}
    paused_answers = sorted({send.error.split(":")[0] for send in queued_at_paused})
    paused = (f"{sum(len(t.acks) for t in probes.values())} batches acknowledged by the "
              f"majority while the leader slept; {len(queued_at_paused)} produce requests "
              f"queued at the paused leader, all refused ({paused_answers}); "
              if fault == "sigstop" else "")
    print(f"\n[replication {fault}] seed {seed}: {ROUNDS} leader {fault}s survived; "
          f"(leader, epoch) before each: {leaders}; {paused}journal/data cut or truncation "
          f"log lines per broker {recovered}; {counters}; {time.monotonic() - started:.1f} s")
    assert len(leaders) == ROUNDS


@pytest.mark.timeout(180)
def test_follower_killed_while_catching_up_converges(make_cluster):
    rng = random.Random(SEED + 10)
    started = time.monotonic()
    cluster = make_cluster(extra_args=FAST_ELECTIONS)
    cluster.create_topic(TOPIC, len(PARTITIONS))
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, WRITER_PARTITIONS, SEED + 10, stop,
                            progress, pause_s=WRITER_PAUSE_S)
    try:
        wait_for_acks(writers, progress, what="before the first kill")
        leader = cluster.leader()
        follower = rng.choice(cluster.others(leader.leader_id))
        kills = 0
        for k in range(FOLLOWER_KILLS):
            cluster.kill(follower, signal.SIGKILL)
            kills += 1
            wait_for_acks(writers, progress, more=FOLLOWER_LAG_BATCHES,
                          what=f"follower down, kill {k}")
            cluster.start_broker(follower)  # it catches up (or truncates) from here...
            time.sleep(rng.uniform(0.0, 1.0))  # ...and is killed again in the middle of it
        cluster.kill(follower, signal.SIGKILL)
        kills += 1
        cluster.start_broker(follower)
        after = cluster.leader()  # it knows the leader again
        wait_for_acks(writers, progress, more=3, what="after the last restart")
    finally:
        stop_writers(writers, stop)
    counters = reckon(cluster, writers)
    # Beyond [0, hw): with the writers stopped and settled, the follower holds all of it.
    for partition in PARTITIONS:
        stored = cluster.stored_partitions(TOPIC, partition)
        assert stored[follower] == stored[after.leader_id], \
            f"{TOPIC}/{partition}: follower {follower} holds " \
            f"[{stored[follower].log_start_offset}, {stored[follower].log_end_offset}), the " \
            f"leader {after.leader_id} [{stored[after.leader_id].log_start_offset}, " \
            f"{stored[after.leader_id].log_end_offset}); bytes equal: " \
            f"{stored[follower].data == stored[after.leader_id].data}"
    truncations = len(cluster.recovery_lines(follower))
    print(f"\n[replication follower] seed {SEED + 10}: follower {follower} SIGKILLed {kills} "
          f"times while catching up; leader before {leader.leader_id}@{leader.epoch}, after "
          f"{after.leader_id}@{after.epoch}; {truncations} recovery/truncation log lines on "
          f"it; {counters}; {time.monotonic() - started:.1f} s")
    assert kills == FOLLOWER_KILLS + 1
