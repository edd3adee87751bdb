"""Heartbeat sender -> heartbeat server over loopback TCP, the server's bounds, and TCP probes."""

import socket
import struct

import pytest

from common.heartbeat import HeartbeatSender
from healthchecker.monitor import SOURCE_PROBE, HeartbeatServer, LivenessTable, Probe, ProbeRunner
from tests.integration.healthchecker.local_cluster import free_ports, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def server():
    server = HeartbeatServer(("127.0.0.1", 0), LivenessTable(), poll_interval_s=0.02).start()
    yield server
    server.stop()


def _closed_by_peer(sock: socket.socket, timeout_s: float = 2.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_sender_heartbeats_reach_the_table_and_goodbye_marks_departure(server):
    sender = HeartbeatSender("svc", targets=[server.address], interval_s=0.05).start()
    first = wait_until(lambda: server.table.snapshot().get("svc"), 2)
    assert first.pid == sender.pid and first.instance == sender.instance and not first.departed
    wait_until(lambda: server.table.snapshot()["svc"].last_seen_at > first.last_seen_at, 2)
    sender.stop(say_goodbye=True)
    wait_until(lambda: server.table.snapshot()["svc"].departed, 2)


def test_sender_survives_a_missing_checker_and_reconnects_when_it_appears():
    (port,) = free_ports(1)
    sender = HeartbeatSender("svc", targets=[("127.0.0.1", port)], interval_s=0.05).start()
    try:
        late = HeartbeatServer(("127.0.0.1", port), LivenessTable(), poll_interval_s=0.02)
        late.start()
        try:
            wait_until(lambda: "svc" in late.table.snapshot(), 3)
        finally:
            late.stop()
        sent_before_restart = sender.sent
        again = HeartbeatServer(("127.0.0.1", port), LivenessTable(), poll_interval_s=0.02)
        again.start()
        try:
            wait_until(lambda: "svc" in again.table.snapshot(), 3)
        finally:
            again.stop()
        assert sender.sent > sent_before_restart
    finally:
        sender.stop()


def test_malformed_and_oversized_frames_close_the_connection(server):
    for frame in (struct.pack(">I", 5) + b"nope!", struct.pack(">I", 10**6)):
        with socket.create_connection(server.address) as sock:
            sock.sendall(frame)
            assert _closed_by_peer(sock)
    assert server.counters["malformed_frames"] == 2
    assert server.table.snapshot() == {}


def test_frames_split_across_segments_are_reassembled(server):
    from common.heartbeat import Heartbeat, encode_heartbeat

    frames = b"".join(encode_heartbeat(Heartbeat(f"s{i}", "h:1", 1, 0.0, i)) for i in range(3))
    with socket.create_connection(server.address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for index in range(0, len(frames), 7):
            sock.sendall(frames[index : index + 7])
        wait_until(lambda: len(server.table.snapshot()) == 3, 2)
    assert server.counters["malformed_frames"] == 0


def test_connection_bound_and_idle_timeout():
    server = HeartbeatServer(
        ("127.0.0.1", 0), LivenessTable(), connections_max=2, idle_timeout_s=0.3,
        poll_interval_s=0.02,
    ).start()
    try:
        held = [socket.create_connection(server.address) for _ in range(2)]
        wait_until(lambda: server.connection_count == 2, 2)
        with socket.create_connection(server.address) as extra:
            assert _closed_by_peer(extra)
        assert server.counters["rejected_connections"] == 1
        # The two idle ones are closed after idle_timeout_s.
        assert all(_closed_by_peer(sock) for sock in held)
        assert server.counters["idle_closed"] == 2
        for sock in held:
            sock.close()
    finally:
        server.stop()


def test_probe_sees_listening_ports_only():
    listener = socket.create_server(("127.0.0.1", 0))
    (closed_port,) = free_ports(1)
    table = LivenessTable()
    probes = [Probe("up", "127.0.0.1", listener.getsockname()[1]),
              Probe("down", "127.0.0.1", closed_port)]
    runner = ProbeRunner(probes, table, interval_s=0.05)
    before = table.snapshot()
    assert before["up"].last_seen_at is None and before["down"].source == SOURCE_PROBE
    runner.probe_once()
    after = table.snapshot()
    assert after["up"].last_seen_at is not None
    assert after["down"].last_seen_at is None
    listener.close()
