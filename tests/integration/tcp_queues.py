"""What the kernel holds for a process that does not read: the bytes waiting in the receive
queue of one TCP connection on 127.0.0.1, from /proc/net/tcp (Linux). A paused (SIGSTOPped)
server still completes handshakes and queues what clients send; this proves a request reached
it rather than assuming so after a sleep."""

from __future__ import annotations

from pathlib import Path

PROC_NET_TCP = Path("/proc/net/tcp")
LOOPBACK_HEX = "0100007F"  # 127.0.0.1, little-endian as /proc prints it


def _endpoint(port: int) -> str:
    return f"{LOOPBACK_HEX}:{port:04X}"


def queued_bytes(server_port: int, client_port: int, table: str | None = None) -> int | None:
    """Bytes the server side of the 127.0.0.1 connection client_port -> server_port has
    received and not read yet; None when no such connection exists (yet)."""
    text = PROC_NET_TCP.read_text() if table is None else table
    local, remote = _endpoint(server_port), _endpoint(client_port)
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 4 and fields[1] == local and fields[2] == remote:
            _tx_queue, rx_queue = fields[4].split(":")
            return int(rx_queue, 16)
    return None
