"""The acceptor both listeners share (services/broker/network/acceptor.py), with stand-in
connections on 127.0.0.1: its bound, its drain and its stop. Every wait has a deadline."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from services.broker.network.acceptor import Acceptor

WAIT_S = 10.0


def wait_until(condition, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


class StandIn:
    """Serves nothing; ends when interrupted (unless stubborn) or force-closed."""

    def __init__(self, sock: socket.socket, forget, stubborn: bool) -> None:
        self.sock = sock
        self.forget = forget
        self.stubborn = stubborn
        self.end = threading.Event()
        self.forced = False

    def run(self) -> None:
        self.end.wait()
        self.sock.close()
        self.forget(self)

    def interrupt(self) -> None:
        if not self.stubborn:
            self.end.set()

    def force_close(self) -> None:
        self.forced = True
        self.end.set()


@pytest.fixture
def served():
    made: list[StandIn] = []
    acceptors: list[Acceptor] = []

    def start(connections_max: int = 8, stubborn: bool = False) -> Acceptor:
        acceptor = Acceptor("127.0.0.1", 0, name="test", connections_max=connections_max,
                            read_timeout_s=5.0, backlog=16)
        acceptor.bind()

        def make(sock, _peer, forget):
            made.append(StandIn(sock, forget, stubborn))
            return made[-1]

        acceptor.start(make)
        acceptors.append(acceptor)
        return acceptor

    yield start, made
    for acceptor in acceptors:
        acceptor.stop_accepting()
        for connection in made:
            connection.force_close()


def connect(acceptor: Acceptor) -> socket.socket:
    return socket.create_connection(acceptor.address, timeout=WAIT_S)


def test_beyond_connections_max_a_new_connection_is_closed_at_once(served):
    start, made = served
    acceptor = start(connections_max=2)
    clients = [connect(acceptor) for _ in range(2)]
    wait_until(lambda: acceptor.connection_count == 2)
    refused = connect(acceptor)
    assert refused.recv(1) == b""  # closed by the acceptor, not left waiting
    assert acceptor.connection_count == 2 and len(made) == 2
    made[0].end.set()  # one leaves: room for the next
    wait_until(lambda: acceptor.connection_count == 1)
    clients.append(connect(acceptor))
    wait_until(lambda: acceptor.connection_count == 2)
    assert len(made) == 3
    for client in [*clients, refused]:
        client.close()


def test_finish_waits_for_interrupted_connections_and_forces_the_stubborn_after_the_grace(served):
    start, made = served
    polite, stubborn = start(), start(stubborn=True)
    clients = [connect(polite), connect(stubborn)]
    wait_until(lambda: polite.connection_count == 1 and stubborn.connection_count == 1)
    for acceptor in (polite, stubborn):
        acceptor.stop_accepting()
        acceptor.interrupt_all()
    # Each acceptor's thread admits its own connection: `made` is in either order.
    yielding = next(connection for connection in made if not connection.stubborn)
    stuck = next(connection for connection in made if connection.stubborn)
    polite.finish(grace_s=WAIT_S)
    assert polite.connection_count == 0 and not yielding.forced
    began = time.monotonic()
    stubborn.finish(grace_s=0.2)
    assert stubborn.connection_count == 0 and stuck.forced
    assert time.monotonic() - began < WAIT_S
    for client in clients:
        client.close()


def test_after_stop_accepting_nothing_is_admitted(served):
    start, made = served
    acceptor = start()
    acceptor.stop_accepting()
    with pytest.raises(OSError):
        connect(acceptor)
    assert made == [] and acceptor.connection_count == 0


def test_a_taken_port_fails_at_bind_and_an_unstarted_socket_is_released():
    first = Acceptor("127.0.0.1", 0, name="test", connections_max=1, read_timeout_s=1.0,
                     backlog=1)
    first.bind()
    first.listen()
    second = Acceptor("127.0.0.1", first.address[1], name="test", connections_max=1,
                      read_timeout_s=1.0, backlog=1)
    with pytest.raises(OSError):
        second.bind()
    first.close_unstarted()
    with pytest.raises(OSError):
        connect(first)


def test_refused_connections_are_counted_by_reason(served):
    start, made = served
    acceptor = start(connections_max=1)
    assert acceptor.refusals() == {"full": 0, "stopping": 0}
    client = connect(acceptor)
    wait_until(lambda: acceptor.connection_count == 1)
    refused = [connect(acceptor) for _ in range(2)]
    for sock in refused:
        assert sock.recv(1) == b""  # closed unserved
    wait_until(lambda: acceptor.refusals()["full"] == 2)
    assert acceptor.refusals() == {"full": 2, "stopping": 0} and len(made) == 1
    for sock in [client, *refused]:
        sock.close()


def test_a_connection_accepted_during_shutdown_is_refused_as_stopping(served):
    # The race the listening socket's close cannot rule out: accept() returned just before
    # stop_accepting(); that connection is closed unserved, and counted apart from `full`.
    start, made = served
    acceptor = start()
    acceptor.stop_accepting()
    with socket.create_server(("127.0.0.1", 0)) as server:  # a TCP pair: _admit sets TCP options
        theirs = socket.create_connection(server.getsockname(), timeout=WAIT_S)
        ours, _ = server.accept()
    acceptor._admit(ours, "late-peer")
    assert theirs.recv(1) == b""
    assert acceptor.refusals() == {"full": 0, "stopping": 1} and made == []
    theirs.close()
