"""Process backend end to end: a real health checker restarts killed, hung and flapping services."""

import os
import re
import signal
import time

import pytest

from healthchecker.local_registry import process_start_ticks
from tests.integration.healthchecker.local_cluster import LocalCluster, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, checkers=1)
    yield cluster
    cluster.shutdown()


def _restarted_pid(cluster: LocalCluster, name: str, old_pid: int, timeout_s: float) -> int:
    return wait_until(
        lambda: (pid := cluster.registry.live_pid(name)) not in (None, old_pid) and pid,
        timeout_s,
    )


def _heartbeat_timeout_s(cluster: LocalCluster) -> float:
    return float(cluster.timings["--heartbeat-timeout-s"])


def test_sigkilled_service_is_restarted_within_timeout_plus_two_seconds(cluster):
    cluster.add_dummy("svc")
    cluster.start_checkers()
    old_pid = cluster.start("svc")
    wait_until(lambda: cluster.current_role(1) == "leader", 10)
    wait_until(lambda: "SEEN service=svc" in cluster.log("healthchecker-1"), 5)
    cluster.registry.kill("svc")
    killed_at = time.monotonic()
    new_pid = _restarted_pid(cluster, "svc", old_pid, _heartbeat_timeout_s(cluster) + 2.0)
    elapsed_s = time.monotonic() - killed_at
    assert elapsed_s <= _heartbeat_timeout_s(cluster) + 2.0
    assert process_start_ticks(new_pid) is not None
    (line,) = cluster.restart_lines(1)
    assert "service=svc attempt=1" in line and "no heartbeat from" in line
    assert wait_until(lambda: "svc up" in cluster.log("svc"), 5)


def test_sigstopped_service_is_killed_and_restarted(cluster):
    cluster.add_dummy("hung")
    cluster.start_checkers()
    old_pid = cluster.start("hung")
    wait_until(lambda: cluster.current_role(1) == "leader", 10)
    wait_until(lambda: "SEEN service=hung" in cluster.log("healthchecker-1"), 5)
    os.kill(old_pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    _restarted_pid(cluster, "hung", old_pid, _heartbeat_timeout_s(cluster) + 2.0)
    assert time.monotonic() - stopped_at <= _heartbeat_timeout_s(cluster) + 2.0
    assert process_start_ticks(old_pid) is None, "the hung instance must be gone"
    wait_until(lambda: "RESTARTED service=hung action=killed_and_started" in cluster.log(
        "healthchecker-1"), 2)


def test_flapping_service_backs_off(tmp_path):
    cluster = LocalCluster(
        tmp_path, checkers=1,
        timings={"--heartbeat-timeout-s": "0.5", "--restart-grace-s": "0.6",
                 "--backoff-base-s": "0.5", "--backoff-max-s": "5"},
    )
    try:
        cluster.add_dummy("flappy", "--exit-after-s", "0.2", "--interval-s", "0.1")
        cluster.start_checkers()
        cluster.start("flappy")
        lines = wait_until(lambda: len(found := cluster.restart_lines(1)) >= 4 and found, 15)
    finally:
        cluster.shutdown()
    backoffs = [float(re.search(r"backoff_s=(\S+)", line).group(1)) for line in lines[:4]]
    assert backoffs == [0.0, 0.5, 1.0, 2.0]
    stamps = [_seconds(line) for line in lines[:4]]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    # A restart waits grace + the previous restart's back-off, and for the (short-lived) new
    # instance to fall silent: at least 0.6, 1.1, 1.6 s; a supervise tick or two more at most.
    for gap, wait_s in zip(gaps, [0.6, 1.1, 1.6], strict=True):
        assert wait_s - 0.05 <= gap <= wait_s + 0.5, gaps
    assert gaps[1] < gaps[2]


def _seconds(log_line: str) -> float:
    hours, minutes, seconds = log_line.split()[0].split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
