"""The broker beats to its health checkers, signed with the cluster secret (here from
$FLIGHTS_CLUSTER_SECRET), and says "stopping" on SIGTERM."""

import socket

import pytest

from common.cluster_secret import SECRET_ENV
from common.heartbeat import STATE_ALIVE, STATE_STOPPING, decode_heartbeat_frame, frame_length

pytestmark = pytest.mark.integration

SECRET = "broker-heartbeat-secret"


def _next_heartbeat(connection: socket.socket):
    prefix = connection.recv(4, socket.MSG_WAITALL)
    if len(prefix) < 4:
        return None
    return decode_heartbeat_frame(connection.recv(frame_length(prefix), socket.MSG_WAITALL),
                                  SECRET.encode())


def test_heartbeats_then_goodbye(fresh_broker, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    checker = socket.create_server(("127.0.0.1", 0))
    checker.settimeout(20)
    try:
        port = checker.getsockname()[1]
        broker = fresh_broker("--heartbeat-targets", f"127.0.0.1:{port}",
                              "--heartbeat-interval-s", "0.1")
        connection, _ = checker.accept()
        connection.settimeout(20)
        first = _next_heartbeat(connection)
        assert (first.name, first.state) == ("broker-1", STATE_ALIVE)
        assert first.pid == broker.proc.pid
        code, _ = broker.terminate()
        assert code == 0
        states = []
        while (beat := _next_heartbeat(connection)) is not None:
            states.append(beat.state)
        assert states[-1] == STATE_STOPPING
        connection.close()
    finally:
        checker.close()
