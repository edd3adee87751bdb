"""HOST:PORT and ID@HOST:PORT, parsed in one place for every service, client and script.

`parse_host_port('[::1]:9092')` -> Address('::1', 9092); `parse_host_ports('a:1,b:2')` -> a
tuple of them; `parse_peers('2@a:1,3@b:2')` -> (Peer(2, 'a', 1), Peer(3, 'b', 2)). Named
listeners, as Kafka writes them: `parse_named_addresses('INTERNAL://a:1,EXTERNAL://b:2')` ->
(NamedAddress('INTERNAL', 'a', 1), ...), and `parse_named_peers('2@INTERNAL://a:1,2@b:2',
default_name='PLAINTEXT')` -> (NamedPeer(2, 'INTERNAL', 'a', 1), NamedPeer(2, 'PLAINTEXT', 'b',
2)); names are case-insensitive and kept upper-case (Kafka's ListenerName.normalised). Errors are
AddressError (a ValueError) naming the text. The health checkers once wrote peers as
ID=HOST:PORT: that spelling is still read, with a one-line deprecation warning on stderr.
"""

from __future__ import annotations

import re
import sys
from typing import NamedTuple, TextIO

PORT_MAX = 65535
# A listener name: a letter, then letters, digits, '_' or '-' (INTERNAL, PLAINTEXT_HOST).
LISTENER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
LISTENER_NAME_CHARS_MAX = 64


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


class NamedAddress(NamedTuple):
    """A named listener's address, Kafka's NAME://HOST:PORT."""

    name: str  # upper-case
    host: str
    port: int

    @property
    def address(self) -> Address:
        return Address(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"


class NamedPeer(NamedTuple):
    """Another node's address on one of its named listeners: ID@NAME://HOST:PORT."""

    node_id: int
    name: str  # upper-case
    host: str
    port: int

    @property
    def address(self) -> Address:
        return Address(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.node_id}@{self.name}://{self.address}"


def parse_listener_name(text: str) -> str:
    """'internal' -> 'INTERNAL': Kafka's listener names are case-insensitive."""
    name = text.strip()
    if not LISTENER_NAME.fullmatch(name) or len(name) > LISTENER_NAME_CHARS_MAX:
        raise AddressError("a listener NAME", text, "a name is a letter, then letters, digits, "
                           f"'_' or '-', at most {LISTENER_NAME_CHARS_MAX} characters")
    return name.upper()


def parse_named_address(text: str, *, port_min: int = 0,
                        default_name: str | None = None) -> NamedAddress:
    """'INTERNAL://h:1' -> NamedAddress('INTERNAL', 'h', 1); without NAME:// the listener is
    `default_name`, or, when there is none, the text is refused."""
    name, sep, address = text.strip().partition("://")
    if not sep:
        if default_name is None:
            raise AddressError("NAME://HOST:PORT", text, "no listener NAME:// before the address")
        name, address = default_name, text
    try:
        host, port = parse_host_port(address, port_min=port_min)
        return NamedAddress(parse_listener_name(name), host, port)
    except AddressError as error:
        raise AddressError("NAME://HOST:PORT", text, error.reason) from error


def parse_named_addresses(text: str, *, port_min: int = 0) -> tuple[NamedAddress, ...]:
    """'A://h:1,B://h:2' -> (NamedAddress('A', 'h', 1), NamedAddress('B', 'h', 2)); empty
    items are skipped. Duplicate names are the caller's to refuse (it can name its flag)."""
    return tuple(parse_named_address(item, port_min=port_min)
                 for item in text.split(",") if item.strip())


def parse_named_peers(text: str, *, default_name: str,
                      port_min: int = 0) -> tuple[NamedPeer, ...]:
    """'2@INTERNAL://a:1,3@b:2' -> (NamedPeer(2, 'INTERNAL', 'a', 1), NamedPeer(3,
    `default_name`, 'b', 2)); empty items are skipped."""
    peers = []
    for item in text.split(","):
        if not item.strip():
            continue
        node, sep, rest = item.strip().partition("@")
        if not sep or not node.strip().isdigit():
            raise AddressError("ID@NAME://HOST:PORT", item, "no numeric ID@ before the address")
        named = parse_named_address(rest, port_min=port_min, default_name=default_name)
        peers.append(NamedPeer(int(node), *named))
    return tuple(peers)


def format_named(items: object) -> str:
    """The inverse of parse_named_addresses and parse_named_peers, for command lines."""
    return ",".join(map(str, items))
