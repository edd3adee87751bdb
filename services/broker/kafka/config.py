"""The Kafka listeners' settings, in Kafka's own terms (docs/kafka.md): `listeners`,
`advertised.listeners` and `listener.security.protocol.map` become `--kafka-listeners`,
`--kafka-advertised-listeners` and `--kafka-listener-security-protocol-map`.

Each named listener (INTERNAL, EXTERNAL, ...) is its own socket; a Kafka client is told every
broker's address on the listener it came in through, so a client inside a container network and
one on the host each get addresses they can reach. Kafka brokers learn each other's advertised
listeners from the controller; Kaska's are given with `--kafka-peers`, one ID@NAME://HOST:PORT
per other broker and listener (each item reads as one of that broker's advertised.listeners).

The single-listener flags stay: `--kafka-listen H:P` is `--kafka-listeners PLAINTEXT://H:P`,
`--kafka-advertise H:P` its advertised address, and a peer without NAME:// is on PLAINTEXT.
Kaska speaks PLAINTEXT only: the map may say so for every listener (as Compose files for Kafka
do), and a listener mapped to, or named after, another protocol is refused.

Checked here: the flags' syntax (common/address.py), duplicate names and ports, advertised
names without a listener, the protocol map. Checked by BrokerConfig (it knows the replication
peers): every other broker has exactly one address on every listener.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.address import (
    Address,
    AddressError,
    NamedAddress,
    NamedPeer,
    parse_host_port,
    parse_listener_name,
    parse_named_addresses,
    parse_named_peers,
)
from common.config_flags import setting
from common.kaska.protocol.metadata import BrokerInfo

PLAINTEXT = "PLAINTEXT"
# Kafka's security protocols; the default map names a listener after its protocol.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_PROTOCOLS = (PLAINTEXT,)


class KafkaListenerConfigError(ValueError):
    """Kafka listener flags that contradict each other or cannot be served."""


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One named listener: where it binds and what it advertises (None: its bound address)."""

    name: str
    listen: Address
    advertise: Address | None


def parse_listeners(text: str) -> tuple[NamedAddress, ...]:
    return parse_named_addresses(text)


def parse_advertised_listeners(text: str) -> tuple[NamedAddress, ...]:
    return parse_named_addresses(text, port_min=1)


def parse_advertised_address(text: str) -> Address:
    return parse_host_port(text, port_min=1)


def parse_kafka_peers(text: str) -> tuple[NamedPeer, ...]:
    return parse_named_peers(text, default_name=PLAINTEXT, port_min=1)


def parse_protocol_map(text: str) -> tuple[tuple[str, str], ...]:
    """'INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT' -> (('INTERNAL', 'PLAINTEXT'), ...)."""
    pairs = []
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.strip().partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise AddressError(
                "NAME:PROTOCOL",
                item,
                f"the protocol must be one of {', '.join(SECURITY_PROTOCOLS)}",
            )
        pairs.append((parse_listener_name(name), protocol))
    return tuple(pairs)


def _duplicates(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return sorted({name for name in names if name in seen or seen.add(name)})


@dataclass(frozen=True, slots=True)
class KafkaListenerConfig:
    """Kafka's wire protocol beside Kaska's (services/broker/kafka/, docs/kafka.md). METADATA
    names every broker by its address on the listener the request came in through: this
    broker's advertised one (default: the bound address) and the peers' (`peers`, by the node
    ids of the replication peers)."""

    listeners: tuple[NamedAddress, ...] = setting(
        "--kafka-listeners",
        "Kafka listeners, NAME://HOST:PORT[,...] (Kafka's `listeners`; port 0: any free port), "
        "each its own socket; docs/kafka.md",
        default=(),
        parse=parse_listeners,
        metavar="NAME://HOST:PORT,...",
    )
    advertised_listeners: tuple[NamedAddress, ...] = setting(
        "--kafka-advertised-listeners",
        "what Kafka clients of each listener are told to use, NAME://HOST:PORT[,...] "
        "(Kafka's `advertised.listeners`; a listener left out advertises its bound address)",
        default=(),
        parse=parse_advertised_listeners,
        metavar="NAME://HOST:PORT,...",
    )
    security_protocol_map: tuple[tuple[str, str], ...] = setting(
        "--kafka-listener-security-protocol-map",
        "NAME:PROTOCOL[,...] (Kafka's `listener.security.protocol.map`); only PLAINTEXT is "
        "served, the default for every listener not named after another protocol",
        default=(),
        parse=parse_protocol_map,
        metavar="NAME:PROTOCOL,...",
    )
    peers: tuple[NamedPeer, ...] = setting(
        "--kafka-peers",
        "the other brokers' advertised Kafka addresses, one per broker and listener: "
        "ID@NAME://HOST:PORT[,...] (ID@HOST:PORT: listener PLAINTEXT); Kafka clients learn "
        "every broker from METADATA",
        default=(),
        parse=parse_kafka_peers,
        metavar="ID@NAME://HOST:PORT,...",
    )
    listen: Address | None = setting(
        "--kafka-listen",
        "one Kafka listener named PLAINTEXT: the same as --kafka-listeners PLAINTEXT://HOST:PORT",
        default=None,
        parse=parse_host_port,
        metavar="HOST:PORT",
    )
    advertise: Address | None = setting(
        "--kafka-advertise",
        "what clients of --kafka-listen are told to use (default: its bound address)",
        default=None,
        parse=parse_advertised_address,
        metavar="HOST:PORT",
    )

    def __post_init__(self) -> None:
        self._check_single_listener_flags()
        listeners = self.all_listeners()
        names = [listener.name for listener in listeners]
        if twice := _duplicates(names):
            raise KafkaListenerConfigError(
                f"--kafka-listeners names {', '.join(twice)} more "
                "than once: each listener needs its own name"
            )
        ports = [listener.port for listener in listeners if listener.port != 0]
        if twice := _duplicates(map(str, ports)):
            raise KafkaListenerConfigError(
                f"--kafka-listeners binds port {', '.join(twice)} "
                "more than once: each listener needs its own port"
            )
        self._check_advertised(set(names))
        self._check_protocols(names)
        if self.peers and not listeners:
            raise KafkaListenerConfigError(
                "--kafka-peers needs a Kafka listener (--kafka-listeners or --kafka-listen)"
            )
        if unknown := sorted({peer.name for peer in self.peers} - set(names)):
            raise KafkaListenerConfigError(
                f"--kafka-peers names listener {', '.join(unknown)}, which this broker does "
                f"not have (its listeners: {', '.join(names) or 'none'}); write each peer as "
                "ID@NAME://HOST:PORT with one of them"
            )

    def _check_single_listener_flags(self) -> None:
        if self.listen is not None and self.listeners:
            raise KafkaListenerConfigError(
                "give --kafka-listen (one listener named PLAINTEXT) or --kafka-listeners, not both"
            )
        if self.advertise is not None and self.listen is None:
            raise KafkaListenerConfigError(
                "--kafka-advertise advertises --kafka-listen; with "
                "--kafka-listeners use --kafka-advertised-listeners"
            )
        if self.advertise is not None and self.advertised_listeners:
            raise KafkaListenerConfigError(
                "give --kafka-advertise or --kafka-advertised-listeners, not both"
            )

    def _check_advertised(self, names: set[str]) -> None:
        advertised = [listener.name for listener in self.advertised_listeners]
        if twice := _duplicates(advertised):
            raise KafkaListenerConfigError(
                f"--kafka-advertised-listeners names {', '.join(twice)} more than once"
            )
        if unknown := sorted(set(advertised) - names):
            raise KafkaListenerConfigError(
                f"--kafka-advertised-listeners names {', '.join(unknown)}, which "
                f"--kafka-listeners does not define (it has: {', '.join(sorted(names)) or 'none'})"
            )

    def _check_protocols(self, names: list[str]) -> None:
        if twice := _duplicates(name for name, _protocol in self.security_protocol_map):
            raise KafkaListenerConfigError(
                f"--kafka-listener-security-protocol-map names {', '.join(twice)} more than once"
            )
        mapped = dict(self.security_protocol_map)
        for name in names:
            protocol = mapped.get(name, name if name in SECURITY_PROTOCOLS else PLAINTEXT)
            if protocol not in SERVED_PROTOCOLS:
                raise KafkaListenerConfigError(
                    f"listener {name} would speak {protocol}; Kaska's Kafka listeners speak "
                    f"PLAINTEXT only (map it: --kafka-listener-security-protocol-map "
                    f"{name}:PLAINTEXT)"
                )

    # -- what the broker reads -----------------------------------------------------------------

    def all_listeners(self) -> tuple[NamedAddress, ...]:
        """Every listener to bind, `--kafka-listen` as PLAINTEXT."""
        if self.listen is not None:
            return (NamedAddress(PLAINTEXT, *self.listen),)
        return self.listeners

    @property
    def enabled(self) -> bool:
        return bool(self.listen is not None or self.listeners)

    def specs(self) -> tuple[ListenerSpec, ...]:
        """Each listener with its advertised address (None: advertise the bound one)."""
        advertised = {listener.name: listener.address for listener in self.advertised_listeners}
        if self.advertise is not None:
            advertised[PLAINTEXT] = self.advertise
        return tuple(
            ListenerSpec(listener.name, listener.address, advertised.get(listener.name))
            for listener in self.all_listeners()
        )

    def peers_on(self, name: str) -> tuple[NamedPeer, ...]:
        """The other brokers' advertised addresses on listener `name`."""
        return tuple(peer for peer in self.peers if peer.name == name)

    def brokers_on(self, name: str, node_id: int, bound: Address) -> tuple[BrokerInfo, ...]:
        """Every broker's advertised address on listener `name`, this one's (`node_id`, its
        advertised address or else `bound`, where its socket is) first: what Metadata answers
        a client of that listener."""
        spec = next(spec for spec in self.specs() if spec.name == name)
        own = BrokerInfo(node_id, *(spec.advertise or bound))
        return (
            own,
            *(BrokerInfo(peer.node_id, peer.host, peer.port) for peer in self.peers_on(name)),
        )
