"""A producer trickling its batch in, a byte at a time, cannot hold a partition for longer than
the broker's read timeout (regression: each recv was bounded, the whole batch was not, and the
batch is received under the partition's append lock)."""

import socket
import struct
import threading
import time

import pytest

from common.kaska import Admin, Producer
from common.kaska.protocol import Api
from common.kaska.protocol.frames import encode_request_header
from common.kaska.protocol.produce import ProducePrefix
from common.kaska.record_batch import encode_batch
from services.broker.config import BrokerConfig
from services.broker.server import BrokerServer
from tests.integration.broker.broker_process import CLIENT_OPTIONS

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 0.5
TRICKLE_PAUSE_S = 0.1  # below the read timeout: every single recv succeeds
TRICKLE_S_MAX = 20.0


def trickle_a_batch(address, topic: str, stop: threading.Event) -> None:
    """Send a PRODUCE frame whose batch arrives a byte per TRICKLE_PAUSE_S until the broker
    gives up on it (or the test stops us)."""
    batch = encode_batch([b"x" * 10_000])
    prefix = ProducePrefix(topic, 0, 1).encode()
    with socket.create_connection(address) as sock:
        sock.sendall(encode_request_header(Api.PRODUCE, 1, len(prefix) + len(batch)) + prefix
                     + batch[:100])
        deadline = time.monotonic() + TRICKLE_S_MAX
        for byte in batch[100:]:
            if stop.wait(TRICKLE_PAUSE_S) or time.monotonic() > deadline:
                return
            try:
                sock.sendall(struct.pack(">B", byte))
            except OSError:  # the broker closed this connection: what we expect
                return


def test_a_trickling_producer_does_not_stall_the_partition(tmp_path):
    config = BrokerConfig(node_id=1, data_dir=tmp_path / "data", port=0,
                          read_timeout_s=READ_TIMEOUT_S)
    stop = threading.Event()
    with BrokerServer(config) as server:
        with Admin(server.bootstrap, **CLIENT_OPTIONS) as admin:
            admin.create_topic("slow")
        trickler = threading.Thread(target=trickle_a_batch,
                                    args=(server.address, "slow", stop))
        trickler.start()
        try:
            with Producer(server.bootstrap, **CLIENT_OPTIONS) as producer:
                time.sleep(3 * TRICKLE_PAUSE_S)  # the trickler now holds the append lock
                started = time.monotonic()
                assert producer.send_msg("slow", b"on time") == 0
                waited_s = time.monotonic() - started
            trickler.join(TRICKLE_S_MAX)
            assert not trickler.is_alive(), "the broker never dropped the trickling producer"
        finally:
            stop.set()
            trickler.join()
    # Its own timeout plus at most one socket timeout, with room for a loaded machine.
    assert waited_s < 2 * READ_TIMEOUT_S + 2.0
