"""Three real health checkers on loopback UDP: kill the leader, a new one takes over in time,
restarts the old leader through the process backend, and the cluster settles again."""

import ast
import socket
import time

import pytest

from healthchecker.bully import Kind, Message
from healthchecker.transport import encode_packet
from tests.integration.healthchecker.local_cluster import LocalCluster, wait_until

pytestmark = pytest.mark.integration

# Scheduling slack for three Python processes on a shared 2-core machine, polled every 20 ms.
SLACK_S = 0.3


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, checkers=3)
    yield cluster
    cluster.shutdown()


def _roles(cluster: LocalCluster) -> dict[int, str]:
    return {node_id: cluster.current_role(node_id) for node_id in cluster.ports}


def test_killed_leader_is_replaced_restarted_and_rejoins(cluster):
    interval_s = float(cluster.timings["--healthcheck-interval-s"])
    answer_timeout_s = float(cluster.timings["--answer-timeout-s"])
    cluster.start_checkers()
    settled = {1: "follower 3", 2: "follower 3", 3: "leader"}
    wait_until(lambda: _roles(cluster) == settled, 10)
    wait_until(lambda: "SEEN service=healthchecker-3" in cluster.log("healthchecker-2"), 5)
    old_pid = cluster.registry.live_pid("healthchecker-3")

    cluster.registry.kill("healthchecker-3")
    killed_at = time.monotonic()
    wait_until(lambda: cluster.current_role(2) == "leader", 10)
    takeover_s = time.monotonic() - killed_at
    assert takeover_s <= 3 * interval_s + answer_timeout_s + SLACK_S, f"took {takeover_s:.2f}s"
    wait_until(lambda: cluster.current_role(1) == "follower 2", 2)

    # The new leader restarts the old one (after its grace period) ...
    new_pid = wait_until(
        lambda: (pid := cluster.registry.live_pid("healthchecker-3")) not in (None, old_pid)
        and pid,
        10,
    )
    assert any("service=healthchecker-3" in line for line in cluster.restart_lines(2))
    assert new_pid != old_pid
    # ... which rejoins. Bully: it is the highest id, so it takes the lead back and 1 and 2
    # follow it; the node it replaced saw it come back through its heartbeats.
    wait_until(lambda: _roles(cluster) == settled, 10)
    assert "ROLE node=2 role=follower leader=3" in cluster.log("healthchecker-2").split(
        "RESTARTED service=healthchecker-3")[-1]


def test_unauthenticated_and_garbage_packets_change_nothing(cluster):
    cluster.start_checkers()
    settled = {1: "follower 3", 2: "follower 3", 3: "leader"}
    wait_until(lambda: _roles(cluster) == settled, 10)
    role_changes = {n: len(cluster.leader_lines(n)) for n in cluster.ports}
    forged = encode_packet(Message(Kind.COORDINATOR, 99), 1, b"wrong-secret")
    claim = encode_packet(Message(Kind.COORDINATOR, 3), 1, b"wrong-secret")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _ in range(50):
            for packet in (forged, claim, b"\x00" * 40, b"x" * 2000):
                for port in cluster.ports.values():
                    sock.sendto(packet, ("127.0.0.1", port))
    # Let several healthcheck rounds pass (absence of change cannot be waited on).
    time.sleep(1.0)
    assert _roles(cluster) == settled
    assert {n: len(cluster.leader_lines(n)) for n in cluster.ports} == role_changes

    # SIGTERM: a graceful, fast exit 0 that reports what was dropped, and is not restarted.
    checker_1 = cluster.children[0]
    checker_1.terminate()
    terminated_at = time.monotonic()
    assert checker_1.wait(timeout=5) == 0
    assert time.monotonic() - terminated_at < 3.0
    (stopped,) = [line for line in cluster.log("healthchecker-1").splitlines() if "STOPPED" in line]
    # UDP may drop some of a burst before they are read; those read are all counted.
    counts = ast.literal_eval(stopped.split("dropped_packets=")[1])
    assert 0 < counts["unauthenticated"] <= 150 and 0 < counts["oversized"] <= 50
    assert set(counts) == {"unauthenticated", "oversized"}, "garbage fails the HMAC first"
    wait_until(lambda: "DEPARTED service=healthchecker-1" in cluster.log("healthchecker-3"), 3)
    time.sleep(2 * float(cluster.timings["--heartbeat-timeout-s"]))
    assert cluster.restart_lines(3) == []
