"""Heartbeat sender -> heartbeat server over loopback TCP, the server's bounds, TCP and HTTP
probes, and the evidence they hand to the supervision (seen, departed, lost)."""

import socket
import struct
import threading
import time

import pytest

from common.heartbeat import HeartbeatSender
from healthchecker.monitor import (
    SOURCE_PROBE,
    HeartbeatServer,
    LivenessTable,
    Probe,
    ProbeRunner,
    parse_probe,
)
from healthchecker.supervision import Departed, Lost, Seen
from tests.integration.healthchecker.local_cluster import free_ports, wait_until

pytestmark = pytest.mark.integration

SECRET = b"heartbeat-test-secret"


@pytest.fixture
def server():
    server = HeartbeatServer(("127.0.0.1", 0), LivenessTable(), secret=SECRET,
                             poll_interval_s=0.02).start()
    yield server
    server.stop()


def _closed_by_peer_within(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _closed_by_peer(sock: socket.socket, timeout_s: float = 2.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_sender_heartbeats_reach_the_table_and_goodbye_marks_departure(server):
    sender = HeartbeatSender("svc", targets=[server.address], interval_s=0.05,
                             secret=SECRET).start()
    first = wait_until(lambda: server.table.snapshot().get("svc"), 2)
    assert first.pid == sender.pid and first.instance == sender.instance and not first.departed
    wait_until(lambda: server.table.snapshot()["svc"].last_seen_at > first.last_seen_at, 2)
    sender.stop(say_goodbye=True)
    wait_until(lambda: server.table.snapshot()["svc"].departed, 2)


def test_sender_survives_a_missing_checker_and_reconnects_when_it_appears():
    (port,) = free_ports(1)
    sender = HeartbeatSender("svc", targets=[("127.0.0.1", port)], interval_s=0.05,
                             secret=SECRET).start()
    try:
        late = HeartbeatServer(("127.0.0.1", port), LivenessTable(), secret=SECRET,
                               poll_interval_s=0.02)
        late.start()
        try:
            wait_until(lambda: "svc" in late.table.snapshot(), 3)
        finally:
            late.stop()
        sent_before_restart = sender.sent
        again = HeartbeatServer(("127.0.0.1", port), LivenessTable(), secret=SECRET,
                               poll_interval_s=0.02)
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
    # The oversized one does not parse; the short one cannot even hold a signature.
    assert server.counters["malformed_frames"] == 1
    assert server.counters["unauthenticated_frames"] == 1
    assert server.table.snapshot() == {}


def test_a_forged_heartbeat_closes_its_connection_and_is_never_recorded(server):
    from common.heartbeat import Heartbeat, encode_heartbeat

    for secret in (b"a-stranger's-secret", b"x"):
        with socket.create_connection(server.address) as sock:
            sock.sendall(encode_heartbeat(Heartbeat("broker-1", "h:1", 1, time.time(), 1),
                                          secret))
            assert _closed_by_peer(sock)
    unsigned = b'{"name":"broker-1","instance":"h:1","pid":1,"timestamp":1.0,"seq":1,' \
               b'"state":"alive"}' + b" " * 32
    with socket.create_connection(server.address) as sock:
        sock.sendall(struct.pack(">I", len(unsigned)) + unsigned)
        assert _closed_by_peer(sock)
    assert server.counters["unauthenticated_frames"] == 3
    assert server.table.snapshot() == {}


def test_replayed_and_stale_heartbeats_are_dropped(server):
    from common.heartbeat import Heartbeat, encode_heartbeat

    fresh = encode_heartbeat(Heartbeat("svc", "h:1", 1, time.time(), 5, incarnation=9), SECRET)
    stale = encode_heartbeat(Heartbeat("old", "h:2", 1, time.time() - 3600, 1, incarnation=9),
                             SECRET)
    older_incarnation = encode_heartbeat(
        Heartbeat("svc", "h:1", 1, time.time(), 6, incarnation=8), SECRET)
    with socket.create_connection(server.address) as sock:
        sock.sendall(fresh)
        wait_until(lambda: "svc" in server.table.snapshot(), 2)
        sock.sendall(fresh + stale + older_incarnation)
        wait_until(lambda: server.counters["replayed_frames"] == 2, 2)
        wait_until(lambda: server.counters["stale_frames"] == 1, 2)
        assert not _closed_by_peer_within(sock, 0.2)  # dropped frames keep the connection
    assert set(server.table.snapshot()) == {"svc"}
    assert server.counters["frames"] == 1


def test_frames_split_across_segments_are_reassembled(server):
    from common.heartbeat import Heartbeat, encode_heartbeat

    frames = b"".join(encode_heartbeat(Heartbeat(f"s{i}", "h:1", 1, time.time(), i), SECRET)
                      for i in range(3))
    with socket.create_connection(server.address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for index in range(0, len(frames), 7):
            sock.sendall(frames[index : index + 7])
        wait_until(lambda: len(server.table.snapshot()) == 3, 2)
    assert server.counters["malformed_frames"] == 0


def test_connection_bound_and_idle_timeout():
    server = HeartbeatServer(
        ("127.0.0.1", 0), LivenessTable(), secret=SECRET, connections_max=2, idle_timeout_s=0.3,
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


# --- evidence of death, handed to the supervision as events ------------------------------------


def _recording_server(**kwargs):
    events = []
    table = LivenessTable(listener=events.append)
    server = HeartbeatServer(("127.0.0.1", 0), table, secret=SECRET, poll_interval_s=0.02,
                             **kwargs).start()
    return server, events


def test_a_connection_closed_without_goodbye_is_a_loss_and_a_goodbye_is_not():
    server, events = _recording_server()
    try:
        crashing = HeartbeatSender("crashing", targets=[server.address], interval_s=0.05,
                                   secret=SECRET).start()
        leaving = HeartbeatSender("leaving", targets=[server.address], interval_s=0.05,
                                  secret=SECRET).start()
        wait_until(lambda: {"crashing", "leaving"} <= set(server.table.snapshot()), 2)
        crashing.stop(say_goodbye=False)  # as the kernel does for a killed process
        leaving.stop(say_goodbye=True)
        wait_until(lambda: Lost("crashing", crashing.instance) in events, 2)
        wait_until(lambda: Departed("leaving", leaving.instance) in events, 2)
        # Both closes taken in hand (absence of a Lost cannot be waited on; this can): no
        # connection left, then an event from the server's one thread after those handlers.
        wait_until(lambda: server.connection_count == 0, 5)
        later = HeartbeatSender("later", targets=[server.address], interval_s=0.05,
                                secret=SECRET).start()
        try:
            wait_until(lambda: Seen("later", later.instance) in events, 5)
        finally:
            later.stop(say_goodbye=True)
        assert [e for e in events if isinstance(e, Lost)] == [Lost("crashing", crashing.instance)]
        assert Seen("crashing", crashing.instance) in events
        assert server.counters["lost_connections"] == 1
    finally:
        server.stop()


def test_closes_by_the_server_itself_are_no_loss():
    server, events = _recording_server(idle_timeout_s=0.2)
    try:
        with socket.create_connection(server.address) as sock:
            from common.heartbeat import Heartbeat, encode_heartbeat

            sock.sendall(encode_heartbeat(Heartbeat("quiet", "h:1", 1, time.time(), 1), SECRET))
            assert _closed_by_peer(sock)  # idle: closed by the server
        assert server.counters["idle_closed"] == 1
        assert not any(isinstance(e, Lost) for e in events)
    finally:
        server.stop()


def test_a_probe_refused_twice_after_answering_is_a_loss():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    events = []
    runner = ProbeRunner([Probe("worker", "127.0.0.1", port)],
                         LivenessTable(listener=events.append), interval_s=0.05)
    runner.probe_once()
    assert events == [Seen("worker")]
    listener.close()
    runner.probe_once()
    assert len(events) == 1, "one refusal may be a restart in progress"
    runner.probe_once()
    runner.probe_once()
    assert [e for e in events if isinstance(e, Lost)] == [
        Lost("worker", "", "probe refused 2 times in a row (nothing listens)")]


def test_an_http_probe_tells_a_paused_process_from_a_live_one():
    answering = socket.create_server(("127.0.0.1", 0))
    paused = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does), never answers
    stop = threading.Event()

    def serve():
        answering.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = answering.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        events = []
        probes = [parse_probe(f"live=http://127.0.0.1:{answering.getsockname()[1]}/"),
                  parse_probe(f"paused=http://127.0.0.1:{paused.getsockname()[1]}/"),
                  Probe("paused-tcp", "127.0.0.1", paused.getsockname()[1])]
        runner = ProbeRunner(probes, LivenessTable(listener=events.append), interval_s=0.2,
                             connect_timeout_s=0.2, answer_timeout_s=0.3)
        runner.probe_once()
        assert Seen("live") in events and Seen("paused-tcp") in events
        assert Seen("paused") not in events, "a plain TCP connect cannot see the pause"
    finally:
        stop.set()
        thread.join(2)
        answering.close()
        paused.close()
