"""HOST:PORT and ID@HOST:PORT, parsed in one place for every service, client and script.

`parse_host_port('[::1]:9092')` -> Address('::1', 9092); `parse_host_ports('a:1,b:2')` -> a
tuple of them; `parse_peers('2@a:1,3@b:2')` -> (Peer(2, 'a', 1), Peer(3, 'b', 2)). Errors are
AddressError (a ValueError) naming the text. The health checkers once wrote peers as
ID=HOST:PORT: that spelling is still read, with a one-line deprecation warning on stderr.
"""

from __future__ import annotations

import sys
from typing import NamedTuple, TextIO

PORT_MAX = 65535


class AddressError(ValueError):
    """Text that is not HOST:PORT (or ID@HOST:PORT) with a port in range."""

    def __init__(self, expected: str, text: str, reason: str) -> None:
        super().__init__(f"expected {expected}, got {text!r}: {reason}")
        self.text = text
        self.reason = reason


class Address(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Peer(NamedTuple):
    """Another node of a cluster: its id and where it listens."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return str(Address(self.host, self.port))


def parse_host_port(text: str, *, port_min: int = 0) -> Address:
    """'host:9092' -> ('host', 9092); '[::1]:9092' -> ('::1', 9092). Port 0 (any free port) is
    allowed unless `port_min` says otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep:
        raise AddressError("HOST:PORT", text, "no ':' before the port")
    if not host:
        raise AddressError("HOST:PORT", text, "the host is empty (use 0.0.0.0 for every "
                           "interface)")
    if not port.isdigit() or not port_min <= int(port) <= PORT_MAX:
        raise AddressError("HOST:PORT", text,
                           f"the port must be an integer in {port_min}..{PORT_MAX}")
    return Address(host, int(port))


def parse_host_ports(text: str, *, port_min: int = 0) -> tuple[Address, ...]:
    """'a:1,b:2' -> (('a', 1), ('b', 2)); empty items are skipped, an empty list is ()."""
    return tuple(parse_host_port(item, port_min=port_min)
                 for item in text.split(",") if item.strip())


def _peer(text: str) -> tuple[Peer, bool]:
    """The peer in `text` and whether it used the deprecated ID=HOST:PORT."""
    node, sep, address = text.strip().partition("@")
    old = not sep
    if old:
        node, sep, address = text.strip().partition("=")
    if not sep or not node.strip().isdigit():
        raise AddressError("ID@HOST:PORT", text, "no numeric ID@ before the address")
    host, port = parse_host_port(address)
    return Peer(int(node), host, port), old and bool(sep)


def parse_peers(text: str, *, warnings: TextIO | None = None) -> tuple[Peer, ...]:
    """'2@a:1,3@b:2' -> (Peer(2, 'a', 1), Peer(3, 'b', 2)); empty items are skipped. The old
    health-checker spelling '2=a:1' is read too, with one deprecation line on `warnings`
    (default stderr) for the whole list."""
    parsed = [_peer(item) for item in text.split(",") if item.strip()]
    peers = tuple(peer for peer, _old in parsed)
    if any(old for _, old in parsed):
        print(f"warning: peers {text.strip()!r}: ID=HOST:PORT is deprecated, write "
              f"{format_peers(peers)}", file=warnings or sys.stderr)
    return peers


def format_peers(peers: object) -> str:
    """The inverse of parse_peers, for command lines: 'ID@HOST:PORT,...'."""
    return ",".join(f"{peer.node_id}@{peer.host}:{peer.port}" for peer in peers)
