"""Leader and follower faults under acks=all writers, in the shape of Kafka's
`replication_test`: real broker processes, a three-broker cluster, five rounds of the same
fault on whoever leads, then the reckoning.

Faults on the leader (one test each): SIGKILL, SIGTERM (the leader hands leadership to a
caught-up voter before it stops: that voter leads the next epoch), and SIGSTOP...SIGCONT (the
paused leader: the others elect a successor and take writes while it sleeps; resumed, it must
not acknowledge what it can no longer commit, and must follow). A killed broker is restarted on
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
import re
import signal
import threading
import time

import pytest

from common.kaska import Producer
from services.broker.storage.log import Log
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
from tests.integration.tcp_queues import queued_bytes

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
QUEUED_TIMEOUT_S = 10.0  # for a request sent to the paused leader to sit in its socket
# The follower's links while it is killed and restarted: its catch-up (tens of KB after each
# restart) takes seconds, whatever the machine.
CATCH_UP_BYTES_PER_S = 40_000
# Small fetches, so a throttled one still completes well within a fetch's 1.5 s timeout: the
# follower makes progress, slowly.
REPLICA_FETCH_BYTES_MAX = 16_384
# Kills of a restarted follower that must land while it is behind; attempts are bounded.
FOLLOWER_KILL_ATTEMPTS_MAX = 4 * FOLLOWER_KILLS
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
    # Writers stopped: every broker must have fetched and committed the last batches before
    # the brokers stop, or the byte comparison below would judge a replica still fetching.
    cluster.wait_caught_up(TOPIC, PARTITIONS)
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
            if fault == "sigterm":
                check_handed_over(cluster, old, new, round_)
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
                wait_queued_at(cluster.brokers[old.leader_id].port, queued)
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


def check_handed_over(cluster, old, new, round_: int) -> None:
    """A SIGTERMed leader hands leadership to a caught-up voter before it stops:
    it says so in its log, and that voter leads the very next epoch -- no election timeout,
    no other candidate in between. The stopped broker has exited, so its log is complete."""
    handed = cluster.log_lines(old.leader_id, rf"handed leadership of epoch {old.epoch} to "
                                              rf"broker (\d+)")
    assert len(handed) == 1, \
        f"round {round_}: leader {old.leader_id} (epoch {old.epoch}) stopped without handing " \
        f"leadership over: {cluster.log_lines(old.leader_id, 'leadership|caught up')}"
    target = int(re.search(r"to broker (\d+)", handed[0]).group(1))
    assert (new.leader_id, new.epoch) == (target, old.epoch + 1), \
        f"round {round_}: handed to {target}, but epoch {new.epoch} is led by {new.leader_id}"


def wait_queued_at(server_port: int, queued) -> None:
    """Until every request of `queued` sits, unread, in the paused broker's socket (the kernel
    accepts for a stopped process): the scenario is a request the leader finds on waking."""
    deadline = time.monotonic() + QUEUED_TIMEOUT_S
    while True:
        waiting = [queued_bytes(server_port, send.local_port) if send.local_port else None
                   for send, _thread in queued]
        if all(waiting):
            return
        assert time.monotonic() < deadline, \
            f"requests not queued at the paused leader after {QUEUED_TIMEOUT_S:g} s: bytes " \
            f"waiting per request {waiting}; errors {[send.error for send, _ in queued]}"
        time.sleep(0.02)


def end_offsets(log: Log, topic: str, partitions: list[int]) -> dict[int, int]:
    return {p: log.partition(topic, p).log_end_offset for p in partitions}


@pytest.mark.timeout(180)
def test_follower_killed_while_catching_up_converges(make_cluster):
    rng = random.Random(SEED + 10)
    started = time.monotonic()
    # Through proxies: the follower's links to its peers are throttled while it is killed
    # again and again, so its catch-up outlasts its start on any machine.
    cluster = make_cluster(peer_via_proxy=True, extra_args=(
        *FAST_ELECTIONS, "--replica-fetch-bytes-max", str(REPLICA_FETCH_BYTES_MAX)))
    cluster.create_topic(TOPIC, len(PARTITIONS))
    stop, progress = threading.Event(), threading.Condition()
    writers = start_writers(cluster.bootstrap, TOPIC, WRITER_PARTITIONS, SEED + 10, stop,
                            progress, pause_s=WRITER_PAUSE_S)
    try:
        wait_for_acks(writers, progress, what="before the first kill")
        leader = cluster.leader()
        follower = rng.choice(cluster.others(leader.leader_id))
        kills, behind_kills = 0, []
        follower_links = [proxy for (i, _j), proxy in cluster.proxies.items() if i == follower]
        for proxy in follower_links:
            proxy.throttle(CATCH_UP_BYTES_PER_S)
        cluster.kill(follower, signal.SIGKILL)
        kills += 1
        while len(behind_kills) < FOLLOWER_KILLS:
            assert kills <= FOLLOWER_KILL_ATTEMPTS_MAX, \
                f"only {len(behind_kills)} of {kills} kills landed while follower " \
                f"{follower} was behind: {behind_kills}"
            wait_for_acks(writers, progress, more=FOLLOWER_LAG_BATCHES,
                          what=f"follower down, kill {kills}")
            leader_view = cluster.leader_id(among=cluster.others(follower))
            cluster.start_broker(follower)  # it catches up (or truncates) from here...
            time.sleep(rng.uniform(0.0, 0.2))  # a random moment of the catch-up (not a wait)
            leader_ends = cluster.partition_offsets(leader_view, TOPIC) or {}
            cluster.kill(follower, signal.SIGKILL)  # ...and is killed in the middle of it
            kills += 1
            # What it held when it died, from its own files, against what the leader held just
            # before: strictly less means it was still catching up at the kill.
            with Log(cluster.brokers[follower].data_dir) as log:
                follower_ends = end_offsets(log, TOPIC, PARTITIONS)
            if any(follower_ends[p] < leader_ends.get(p, (0, 0))[0] for p in PARTITIONS):
                behind_kills.append((follower_ends, leader_ends))
        for proxy in follower_links:
            proxy.throttle(None)
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
          f"times, {len(behind_kills)} of them while behind the leader; leader before "
          f"{leader.leader_id}@{leader.epoch}, after "
          f"{after.leader_id}@{after.epoch}; {truncations} recovery/truncation log lines on "
          f"it; {counters}; {time.monotonic() - started:.1f} s")
    assert len(behind_kills) == FOLLOWER_KILLS
