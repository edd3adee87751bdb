"""Free ports on 127.0.0.1 for the processes of one run."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free for both TCP and UDP on 127.0.0.1 right now (a health
    checker uses one port for both). Ask for all the ports of a run in one call: the ports are
    held until all are found, so one call never returns the same port twice."""
    ports: list[int] = []
    holders: list[socket.socket] = []
    while len(ports) < count:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind(("127.0.0.1", 0))
        port = tcp.getsockname()[1]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind(("127.0.0.1", port))
        except OSError:
            tcp.close()
            udp.close()
            continue
        holders += [tcp, udp]
        ports.append(port)
    for holder in holders:
        holder.close()
    return ports
