"""The status service's settings, every bound explicit, checked once at start.

Addresses: `--brokers` is the Kaska bootstrap list (the session records are read from it);
`--broker-metrics` the brokers' Prometheus endpoints, in broker order (the i-th is broker-i,
node id i, as every deployment of this project numbers them); `--checkers` the health
checkers' status endpoints (healthchecker/status.py), the i-th being healthchecker-i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.address import Address, parse_host_ports

REFRESH_INTERVAL_S_DEFAULT = 1.0
REQUEST_TIMEOUT_S_DEFAULT = 2.0
TIMELINE_EVENTS_MAX_DEFAULT = 60
DEDUP_WINDOW_S_DEFAULT = 5.0
HISTORY_POINTS_MAX_DEFAULT = 120
SESSIONS_MAX_DEFAULT = 64
PARTITIONS_SHOWN_MAX_DEFAULT = 48
ENDPOINTS_MAX = 32
LINKS_MAX = 8



class StatusConfigError(ValueError):
    """A status-service setting out of range or that does not parse."""


def parse_addresses(text: str) -> tuple[Address, ...]:
    """1..ENDPOINTS_MAX HOST:PORT (common/address.py), ports in 1..65535."""
    addresses = parse_host_ports(text, port_min=1)
    if not 0 < len(addresses) <= ENDPOINTS_MAX:
        raise StatusConfigError(f"expected 1..{ENDPOINTS_MAX} HOST:PORT, got {text!r}")
    return addresses


def parse_link(text: str) -> tuple[str, str]:
    """'Spark master=http://127.0.0.1:8080/' -> ('Spark master', 'http://127.0.0.1:8080/')."""
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.startswith(("http://", "https://")):
        raise StatusConfigError(f"expected NAME=http://..., got {text!r}")
    return name.strip(), url.strip()


@dataclass(frozen=True)
class StatusConfig:
    brokers: str  # Kaska bootstrap list, HOST:PORT,...
    broker_metrics: tuple[Address, ...]
    checkers: tuple[Address, ...]
    secret: bytes  # the health checkers' shared secret (signs the status requests)
    token: str | None = None  # Kaska's shared token, if the brokers want one
    refresh_interval_s: float = REFRESH_INTERVAL_S_DEFAULT
    request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT
    timeline_events_max: int = TIMELINE_EVENTS_MAX_DEFAULT
    dedup_window_s: float = DEDUP_WINDOW_S_DEFAULT
    history_points_max: int = HISTORY_POINTS_MAX_DEFAULT
    sessions_max: int = SESSIONS_MAX_DEFAULT
    partitions_shown_max: int = PARTITIONS_SHOWN_MAX_DEFAULT
    links: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in ("refresh_interval_s", "request_timeout_s", "dedup_window_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise StatusConfigError(f"{name} must be a positive number of seconds, "
                                        f"got {value!r}")
        for name in ("timeline_events_max", "history_points_max", "sessions_max",
                     "partitions_shown_max"):
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= 10_000):
                raise StatusConfigError(f"{name} must be an integer in 1..10000, got {value!r}")
        if not self.secret:
            raise StatusConfigError("the checkers' secret is empty")
        if len(self.links) > LINKS_MAX:
            raise StatusConfigError(f"at most {LINKS_MAX} links")
        if not self.broker_metrics or not self.checkers:
            raise StatusConfigError("at least one broker metrics endpoint and one checker")

    def broker_name(self, index: int) -> str:
        return f"broker-{index + 1}"

    def checker_name(self, index: int) -> str:
        return f"healthchecker-{index + 1}"
