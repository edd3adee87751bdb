"""Process backend end to end: real health checkers restart killed, hung, flapping and slow
services. Bounds are generous (a busy 2-core machine); the figures are measured by
`python -m tests.integration.healthchecker.measure_healing`."""

import os
import re
import signal
import time

import pytest

from healthchecker.local_registry import process_start_ticks
from tests.integration.healthchecker.local_cluster import MARKER, LocalCluster, wait_until

pytestmark = pytest.mark.integration

# Generous: kill -> restarted -> heartbeating takes ~0.5 s on an idle machine.
HEAL_S_MAX = 10.0


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, checkers=3)
    yield cluster
    cluster.shutdown()


def _started(cluster: LocalCluster, *services: str) -> dict[str, int]:
    cluster.start_checkers()
    pids = {name: cluster.start(name) for name in services}
    wait_until(lambda: cluster.leader() == 3, 15)
    for name, pid in pids.items():
        wait_until(lambda name=name, pid=pid: cluster.heard_by_all(name, pid), 10)
    return pids


def test_sigkilled_service_is_restarted_at_once_and_heartbeats_again(cluster):
    cluster.add_dummy("svc")
    old_pid = _started(cluster, "svc")["svc"]
    cluster.registry.kill("svc")
    new_pid = wait_until(lambda: cluster.new_pid("svc", old_pid), HEAL_S_MAX)
    wait_until(lambda: cluster.heard_from("svc", new_pid), HEAL_S_MAX)
    assert process_start_ticks(new_pid) is not None
    (line,) = cluster.all_restart_lines("svc")
    assert line in cluster.restart_lines(3), "only the leader restarts"
    assert "attempt=1" in line and "connection closed without a goodbye" in line
    # Every checker, not only the leader, saw it go (or heard of its restart from the leader
    # first) and come back.
    for node_id in (1, 2):
        name = f"healthchecker-{node_id}"
        wait_until(lambda name=name: "PHASE service=svc phase=up previous=starting"
                   in cluster.log(name), HEAL_S_MAX)
        assert re.search(r"PHASE service=svc phase=(dead|starting) previous=up",
                         cluster.log(name))


def test_sigstopped_service_is_killed_and_replaced(cluster):
    cluster.add_dummy("hung")
    old_pid = _started(cluster, "hung")["hung"]
    os.kill(old_pid, signal.SIGSTOP)
    timeout_s = float(cluster.timings["--heartbeat-timeout-s"])
    new_pid = wait_until(lambda: cluster.new_pid("hung", old_pid), timeout_s + HEAL_S_MAX)
    wait_until(lambda: cluster.heard_from("hung", new_pid), HEAL_S_MAX)
    assert process_start_ticks(old_pid) is None, "the hung instance must be gone"
    wait_until(lambda: "RESTARTED service=hung action=killed_and_started" in cluster.log(
        "healthchecker-3"), 5)
    (line,) = cluster.all_restart_lines("hung")
    assert "no heartbeat from" in line, "a paused process keeps its connection: silence tells"
    assert f"its process frozen: pid {old_pid} stopped" in line, "told frozen, not slow"


def test_a_start_stopped_before_its_first_heartbeat_is_replaced_long_before_its_deadline(
        tmp_path):
    """SIGSTOP lands while a slow starter is still starting (no heartbeat yet; its start
    deadline is 120 s): the leader's inspection of the start finds it frozen and restarts it
    then -- every half hung timeout, 3 s here -- not at the deadline."""
    cluster = LocalCluster(tmp_path, checkers=3, timings={"--start-deadline": "slow-*=120"})
    try:
        cluster.add_dummy("slow-1", "--start-delay-s", "10")
        cluster.start_checkers()
        wait_until(lambda: cluster.leader() == 3, 15)
        old_pid = cluster.start("slow-1")
        os.kill(old_pid, signal.SIGSTOP)
        new_pid = wait_until(lambda: cluster.new_pid("slow-1", old_pid), 60)
        assert not cluster.heard_from("slow-1", old_pid), "stopped before its first heartbeat"
        (line,) = cluster.all_restart_lines("slow-1")
        assert "before its first sign of life" in line and f"pid {old_pid} stopped" in line, line
        assert process_start_ticks(old_pid) is None, "the stopped instance must be gone"
        wait_until(lambda: cluster.heard_from("slow-1", new_pid), 60)
    finally:
        cluster.shutdown()


def test_a_busy_service_that_cannot_beat_is_left_alone_until_the_hung_timeout(cluster):
    """Silent but running (its heartbeat thread starved, as a JVM on a loaded machine): the
    leader inspects it, finds it running, and restarts it only once silent the hung timeout,
    not at the heartbeat timeout (a restart storm of slow services on a busy machine)."""
    cluster.add_dummy("busy")
    old_pid = _started(cluster, "busy")["busy"]
    os.kill(old_pid, signal.SIGUSR1)
    inspected = wait_until(lambda: re.search(
        r"INSPECTED service=busy frozen=(\w+) (.*)", cluster.log("healthchecker-3")), HEAL_S_MAX)
    assert inspected.group(1) == "False", inspected.group(0)
    assert cluster.all_restart_lines("busy") == [], "inspected as running: not dead yet"
    hung_s = float(cluster.timings["--hung-timeout-s"])
    new_pid = wait_until(lambda: cluster.new_pid("busy", old_pid), hung_s + HEAL_S_MAX)
    (line,) = cluster.all_restart_lines("busy")
    assert f"while its process runs (hung timeout {hung_s:g}s)" in line
    silent_s = float(re.search(r"no heartbeat from \S+ for ([0-9.]+)s", line).group(1))
    assert silent_s >= hung_s, line  # printed to 0.1 s
    wait_until(lambda: cluster.heard_from("busy", new_pid), HEAL_S_MAX)


def test_flapping_service_backs_off(tmp_path):
    cluster = LocalCluster(
        tmp_path, checkers=1,
        timings={"--backoff-base-s": "0.5", "--backoff-max-s": "5"},
    )
    try:
        cluster.add_dummy("flappy", "--exit-after-s", "0.2", "--interval-s", "0.1")
        cluster.start_checkers()
        cluster.start("flappy")
        lines = wait_until(lambda: len(found := cluster.restart_lines(1)) >= 5 and found, 60)
    finally:
        cluster.shutdown()
    backoffs = [float(re.search(r"backoff_s=(\S+)", line).group(1)) for line in lines[:5]]
    assert backoffs == [0.0, 0.5, 1.0, 2.0, 4.0]
    stamps = [_seconds(line) for line in lines[:5]]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    # Restart n+1 comes no sooner than restart n's back-off (log stamps are to the millisecond);
    # the upper bounds only say it is not stuck.
    for gap, backoff_s in zip(gaps, backoffs, strict=False):
        assert backoff_s - 0.01 <= gap <= backoff_s + HEAL_S_MAX, gaps


def test_slow_starter_of_a_slow_kind_is_not_restarted_in_a_loop(tmp_path):
    # The default kind gets 1 s to start, the `slow-*` kind 8 s; the service needs 2.5 s.
    cluster = LocalCluster(
        tmp_path, checkers=1,
        timings={"--start-deadline-s": "1", "--start-deadline": "slow-*=8"},
    )
    try:
        cluster.add_dummy("slow-1", "--start-delay-s", "2.5")
        cluster.add_dummy(MARKER)
        cluster.start_checkers()
        old_pid = cluster.start("slow-1")
        cluster.start(MARKER)
        wait_until(lambda: cluster.heard_from("slow-1", old_pid), 15)
        wait_until(lambda: cluster.phase_lines(1, MARKER, "up"), 15)
        cluster.registry.kill("slow-1")
        new_pid = wait_until(lambda: cluster.new_pid("slow-1", old_pid), HEAL_S_MAX)
        wait_until(lambda: cluster.heard_from("slow-1", new_pid), 15)
        # Up again (2.5 s after its restart: a wrong 1 s deadline would have killed this
        # instance before its first heartbeat), after exactly the one restart of the kill.
        wait_until(lambda: len(cluster.phase_lines(1, "slow-1", "up")) >= 2, 15)
        restarts = cluster.all_restart_lines("slow-1")
        assert len(restarts) == 1, restarts
        # ...and the checker has looked at it again since, and let it be.
        cluster.evaluated_after_now(1)
        assert cluster.all_restart_lines("slow-1") == restarts
        assert cluster.registry.live_pid("slow-1") == new_pid
    finally:
        cluster.shutdown()


def test_a_slow_starter_gets_a_longer_deadline_after_each_miss(tmp_path):
    # A 1 s deadline and a service that needs 3 s: it misses 1 s, then 2 s, and makes 4 s (8 s
    # on a very busy machine). No loop.
    cluster = LocalCluster(tmp_path, checkers=1, timings={"--start-deadline-s": "1"})
    try:
        cluster.add_dummy("sluggish", "--start-delay-s", "3")
        cluster.add_dummy(MARKER)
        cluster.start_checkers()
        cluster.start(MARKER)
        wait_until(lambda: cluster.phase_lines(1, MARKER, "up"), 15)
        cluster.start("sluggish")
        wait_until(lambda: cluster.phase_lines(1, "sluggish", "up"), 60)
        # Restarts are decided on the same thread that logs the phase: all of them are logged.
        lines = cluster.all_restart_lines("sluggish")
        assert 2 <= len(lines) <= 4, lines
        deadlines = re.findall(r"start deadline (\d+)s", "\n".join(lines))
        assert deadlines == ["1", "2", "4", "8"][: len(lines)], lines
        # A heartbeat timeout later the checker has provably examined it again, and let it be.
        time.sleep(float(cluster.timings["--heartbeat-timeout-s"]))  # the moment to look
        cluster.evaluated_after_now(1)
        assert cluster.all_restart_lines("sluggish") == lines, "up: no more restarts"
    finally:
        cluster.shutdown()


def _seconds(log_line: str) -> float:
    hours, minutes, seconds = log_line.split()[0].split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
