"""A producer that stalls halfway through its batch stalls only itself: the batch lands in its
connection's buffer off every lock, so the other producers of the partition go on at once (issue
21: "a produce never holds a partition lock while it waits on a socket"), and the broker drops
the stalled one at its read timeout (regression: the batch was received under the partition's
append lock, so every producer of the partition waited up to that timeout)."""

import socket
import struct
import threading
import time

import pytest

from common.address import Address
from common.kaska import Admin, Producer
from common.kaska.protocol import Api
from common.kaska.protocol.frames import encode_request_header
from common.kaska.protocol.produce import ProducePrefix
from common.kaska.record_batch import encode_batch
from services.broker.config import BrokerConfig, NetworkConfig
from services.broker.replication.config import ReplicationConfig
from services.broker.server import BrokerServer
from tests.integration.broker.broker_process import CLIENT_OPTIONS

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 6.0
TRICKLE_PAUSE_S = 0.05  # far below the read timeout: every single recv succeeds
TRICKLE_S_MAX = 60.0
BYTES_SENT_FIRST = 100
STALL_S_MAX = 1.0  # the bound on any other produce's stall
ON_TIME_SENDS = 20


class Trickler(threading.Thread):
    """Sends a PRODUCE frame whose batch arrives a byte per TRICKLE_PAUSE_S until the broker
    drops the connection (`dropped_at`) or the test stops it."""

    def __init__(self, address, topic: str) -> None:
        super().__init__(name="trickler", daemon=True)
        self.address, self.topic = address, topic
        self.stop = threading.Event()
        self.bytes_sent = 0
        self.dropped_at: float | None = None

    def run(self) -> None:
        batch = encode_batch([b"x" * 10_000])
        prefix = ProducePrefix(self.topic, 0, 1).encode()
        with socket.create_connection(self.address) as sock:
            sock.sendall(encode_request_header(Api.PRODUCE, 1, len(prefix) + len(batch))
                         + prefix + batch[:BYTES_SENT_FIRST])
            self.bytes_sent = BYTES_SENT_FIRST
            deadline = time.monotonic() + TRICKLE_S_MAX
            for byte in batch[BYTES_SENT_FIRST:]:
                if self.stop.wait(TRICKLE_PAUSE_S) or time.monotonic() > deadline:
                    return
                try:
                    sock.sendall(struct.pack(">B", byte))
                    self.bytes_sent += 1
                    if sock.recv(1, socket.MSG_DONTWAIT) == b"":
                        raise ConnectionResetError("closed by the broker")
                except BlockingIOError:
                    continue  # nothing to read: still open
                except OSError:  # the broker closed this connection: what we expect
                    self.dropped_at = time.monotonic()
                    return


def test_a_stalled_producer_does_not_stall_the_others_of_its_partition(tmp_path):
    config = BrokerConfig(
        data_dir=tmp_path / "data", replication=ReplicationConfig(node_id=1),
        network=NetworkConfig(listen=Address("127.0.0.1", 0), read_timeout_s=READ_TIMEOUT_S))
    with BrokerServer(config) as server:
        with Admin(server.bootstrap, **CLIENT_OPTIONS) as admin:
            admin.create_topic("slow")
        trickler = Trickler(server.address, "slow")
        trickler.start()
        try:
            with Producer(server.bootstrap, **CLIENT_OPTIONS) as producer:
                deadline = time.monotonic() + 30
                while trickler.bytes_sent < BYTES_SENT_FIRST + 5:  # its batch is on the wire
                    assert time.monotonic() < deadline and trickler.is_alive()
                    time.sleep(0.01)
                stalls_s = []
                for i in range(ON_TIME_SENDS):
                    started = time.monotonic()
                    assert producer.send_msg("slow", b"on time %d" % i) == i
                    stalls_s.append(time.monotonic() - started)
                sent_at = time.monotonic()
            # The scenario: every send happened while the trickler's batch was half on the wire.
            assert trickler.dropped_at is None and trickler.is_alive(), (
                "the trickler was dropped before the other producer was done: no overlap")
            trickler.join(TRICKLE_S_MAX)
            assert not trickler.is_alive(), "the broker never dropped the stalled producer"
        finally:
            trickler.stop.set()
            trickler.join()
    assert max(stalls_s) < STALL_S_MAX, stalls_s
    assert trickler.dropped_at is not None and trickler.dropped_at > sent_at
    assert trickler.dropped_at - sent_at < READ_TIMEOUT_S + 10, "dropped near its read timeout"
