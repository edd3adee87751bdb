"""tests/integration/tcp_queues.py against a real unread connection and a captured table."""

import socket
import time

from tests.integration.tcp_queues import queued_bytes

TABLE = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 0100007F:1F90 0100007F:D431 01 00000000:0000002A 00:00000000 00000000     0
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0
"""


def test_reads_the_server_sides_receive_queue_from_the_table():
    assert queued_bytes(0x1F90, 0xD431, TABLE) == 42
    assert queued_bytes(0x1F90, 0xD432, TABLE) is None  # no such connection


def test_sees_bytes_a_listener_has_not_accepted_yet():
    # The server never accept()s, like a paused one.
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        client.sendall(b"x" * 100)
        deadline = time.monotonic() + 10.0
        while (queued := queued_bytes(server.getsockname()[1],
                                      client.getsockname()[1])) != 100:
            assert time.monotonic() < deadline, f"queued: {queued}"
            time.sleep(0.01)
