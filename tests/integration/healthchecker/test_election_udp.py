"""Three real health checkers on loopback UDP: kill (or pause) the leader, a new one takes over,
restarts the old leader through the process backend at once, and the cluster settles again;
forged, replayed and garbage packets change nothing and are counted. Bounds are generous (a busy
2-core machine); the figures are measured by `measure_healing`."""

import ast
import os
import signal
import socket
import time

import pytest

from healthchecker.bully import Kind, Message
from healthchecker.local_registry import process_start_ticks
from healthchecker.transport import PACKET_BYTES_MAX, encode_packet
from tests.integration.healthchecker.local_cluster import (
    MARKER,
    SECRET,
    LocalCluster,
    wait_until,
)

pytestmark = pytest.mark.integration

HEAL_S_MAX = 10.0
SETTLED = {1: "follower 3", 2: "follower 3", 3: "leader"}


# Garbage every checker drops as unauthenticated: nothing else sends it any, until the burst of
# the forged-packets test.
SETTLE_SENTINEL = b"\x00" * 40
SERVICE_UP_S_MAX = 60.0
SETTLE_S_MAX = 30.0


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, checkers=3, metrics=True)
    yield cluster
    cluster.shutdown()


def _roles(cluster: LocalCluster) -> dict[int, str]:
    return {node_id: cluster.current_role(node_id) for node_id in cluster.ports}


def _role_line_counts(cluster: LocalCluster) -> dict[int, int]:
    return {node_id: len(cluster.leader_lines(node_id)) for node_id in cluster.ports}


def _settled(cluster: LocalCluster) -> int:
    """Until 3 leads, and still does after the start-up elections have played out (a node that
    starts late makes the others re-run theirs: they may flap once on a busy machine). Played
    out: 1 and 2 follow 3, and then every checker read a packet sent to it after that (so every
    election packet queued to it before), and no role changed meanwhile; what packets the
    settled roles send change no role. Returns the sentinels sent (counted as unauthenticated).
    """
    deadline = time.monotonic() + SETTLE_S_MAX
    sent = 0
    while True:
        wait_until(lambda: _roles(cluster) == SETTLED, SETTLE_S_MAX)
        before = _role_line_counts(cluster)
        sent += cluster.udp_barrier(SETTLE_SENTINEL, "unauthenticated")
        if _roles(cluster) == SETTLED and _role_line_counts(cluster) == before:
            break
        assert time.monotonic() < deadline, f"roles still changing: {_roles(cluster)}"
    for node_id in (1, 2):
        wait_until(lambda node_id=node_id: "SEEN service=healthchecker-3" in cluster.log(
            f"healthchecker-{node_id}"), 10)
    return sent


def test_killed_leader_is_replaced_restarted_at_once_and_rejoins(cluster):
    cluster.start_checkers()
    _settled(cluster)
    old_pid = cluster.registry.live_pid("healthchecker-3")

    cluster.registry.kill("healthchecker-3")
    wait_until(lambda: cluster.leader(among={1, 2}) == 2, HEAL_S_MAX)
    new_pid = wait_until(lambda: cluster.new_pid("healthchecker-3", old_pid), HEAL_S_MAX)
    (line,) = cluster.all_restart_lines("healthchecker-3")
    assert line in cluster.restart_lines(2), "the successor restarts it"
    assert "connection closed without a goodbye" in line, "no waiting out the silence"
    # It rejoins. Bully: it is the highest id, so it takes the lead back and 1 and 2 follow it.
    wait_until(lambda: cluster.heard_from("healthchecker-3", new_pid), HEAL_S_MAX)
    wait_until(lambda: _roles(cluster) == SETTLED, 15)
    assert "ROLE node=2 role=follower leader=3" in cluster.log("healthchecker-2").split(
        "RESTARTED service=healthchecker-3")[-1]


def test_leader_and_a_service_killed_together_are_both_restarted_by_the_successor(cluster):
    cluster.add_dummy("svc")
    cluster.start_checkers()
    svc_pid = cluster.start("svc")
    _settled(cluster)
    wait_until(lambda: cluster.heard_by_all("svc", svc_pid), 10)
    old_leader_pid = cluster.registry.live_pid("healthchecker-3")

    cluster.registry.kill("svc")
    cluster.registry.kill("healthchecker-3")
    # Node 2 was a follower when svc died; it knew all the same and acts once it leads.
    new_svc = wait_until(lambda: cluster.new_pid("svc", svc_pid), HEAL_S_MAX)
    wait_until(lambda: cluster.new_pid("healthchecker-3", old_leader_pid), HEAL_S_MAX)
    wait_until(lambda: cluster.heard_from("svc", new_svc), HEAL_S_MAX)
    # Once, by 3 or by 2; twice when 3 died between its decision and its confirmation (2 then
    # redoes it at once). Never a third time: the state is shared.
    restarts = cluster.all_restart_lines("svc")
    assert 1 <= len(restarts) <= 2, restarts
    assert "start deadline" not in "".join(restarts), "no waiting for a restart that never was"


def test_paused_leader_is_replaced(cluster):
    cluster.start_checkers()
    _settled(cluster)
    old_pid = cluster.registry.live_pid("healthchecker-3")
    os.kill(old_pid, signal.SIGSTOP)
    timeout_s = float(cluster.timings["--heartbeat-timeout-s"])
    new_pid = wait_until(lambda: cluster.new_pid("healthchecker-3", old_pid),
                         timeout_s + HEAL_S_MAX)
    assert process_start_ticks(old_pid) is None, "the paused instance was killed"
    wait_until(lambda: cluster.heard_from("healthchecker-3", new_pid), HEAL_S_MAX)
    wait_until(lambda: _roles(cluster) == SETTLED, 15)
    (line,) = cluster.all_restart_lines("healthchecker-3")
    assert "no heartbeat from" in line


def test_forged_replayed_and_garbage_packets_change_nothing(cluster):
    cluster.add_dummy(MARKER)
    cluster.start_checkers()
    cluster.start(MARKER)
    sentinels = _settled(cluster)
    # A bound, not a wait: a Python service's imports take seconds on a loaded machine.
    wait_until(lambda: all(cluster.phase_lines(n, MARKER, "up") for n in cluster.ports),
               SERVICE_UP_S_MAX)
    role_changes = _role_line_counts(cluster)
    forged = [encode_packet(Message(Kind.COORDINATOR, 99), to, b"wrong-secret", 2**63, 7)
              for to in cluster.ports]
    claims = [encode_packet(Message(Kind.COORDINATOR, 3), to, b"wrong-secret", 2**63, 7)
              for to in cluster.ports]
    # Authentic packets (the test knows the secret), as an eavesdropper could record them:
    # node 1's current incarnation and its first counter, which node 3 (that hears from node 1
    # all the time) has long seen; and one recorded an hour ago, stale everywhere. An accepted
    # ELECTION from node 1 would make its receiver run an election.
    secret = SECRET.encode()
    incarnation_1 = int(cluster.log("healthchecker-1").split("incarnation=")[1].split()[0])
    replayed = encode_packet(Message(Kind.ELECTION, 1), 3, secret, incarnation_1, 1)
    hour_ago_ms = round((time.time() - 3600) * 1000)
    stale = [encode_packet(Message(Kind.ELECTION, 1), to, secret, incarnation_1, 10**6,
                           hour_ago_ms) for to in (2, 3)]
    garbage = [b"\x00" * 40]
    oversized = b"x" * (PACKET_BYTES_MAX + 100)  # sent last, and only then: read, it proves
    # that the checker read every packet of the burst before it
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _ in range(50):
            for port in cluster.ports.values():
                for packet in (*forged, *claims, *garbage):
                    sock.sendto(packet, ("127.0.0.1", port))
            sock.sendto(replayed, ("127.0.0.1", cluster.ports[3]))
            for to, packet in zip((2, 3), stale, strict=True):
                sock.sendto(packet, ("127.0.0.1", cluster.ports[to]))
    # Absence of change cannot be waited on; every checker having read the whole burst can.
    oversized_sent = cluster.udp_barrier(oversized, "oversized")
    assert _roles(cluster) == SETTLED
    assert _role_line_counts(cluster) == role_changes

    # SIGTERM: a graceful, fast exit 0 that reports what was dropped, and is not restarted.
    checker_3 = cluster.children[2]
    checker_3.terminate()
    assert checker_3.wait(timeout=10) == 0
    (stopped,) = [line for line in cluster.log("healthchecker-3").splitlines() if "STOPPED" in line]
    # UDP may drop some of a burst before they are read; those read are all counted.
    counts = ast.literal_eval(stopped.split("dropped_packets=")[1])
    assert 0 < counts["unauthenticated"] <= 350 + sentinels
    assert 0 < counts["oversized"] <= oversized_sent <= 50
    assert 0 < counts["replayed"] <= 50 and 0 < counts["stale"] <= 50
    assert set(counts) == {"unauthenticated", "oversized", "replayed", "stale"}
    wait_until(lambda: "DEPARTED service=healthchecker-3" in cluster.log("healthchecker-2"), 5)
    # The goodbye also tells the followers their leader left: they elect 2 without waiting.
    wait_until(lambda: cluster.leader(among={1, 2}) == 2, HEAL_S_MAX)
    # Twice its heartbeat timeout after it left (the moment to look), the new leader has
    # provably examined it again, and left it alone.
    time.sleep(2 * float(cluster.timings["--heartbeat-timeout-s"]))
    cluster.evaluated_after_now(2)
    assert cluster.all_restart_lines("healthchecker-3") == []
