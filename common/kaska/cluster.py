"""What the admin, producer and consumer share: the bootstrap list, one connection per broker,
who leads which partition (METADATA, refreshed on NOT_LEADER and unknown-partition answers,
NOT_LEADER's leader hint followed at once) and the retry loop with exponential backoff.

Thread-safe: one lock guards the connection and leader tables; requests run outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from common.kaska.connection import RESPONSE_BYTES_MAX_DEFAULT, BrokerConnection
from common.kaska.errors import (
    BrokerUnavailableError,
    ConnectionLostError,
    InvalidResponseError,
    KaskaError,
    NotLeaderError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.metadata import NO_LEADER, MetadataRequest
from common.kaska.retry import RetryPolicy

log = logging.getLogger(__name__)

Address = tuple[str, int]
# Failures after which the request may have reached the broker and been applied.
MAYBE_DELIVERED = (ConnectionLostError, RequestTimedOutError, InvalidResponseError)


def parse_address(text: str) -> Address:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"broker address {text!r} is not HOST:PORT")
    return host, int(port)


def parse_brokers(brokers: str | Sequence[str]) -> list[Address]:
    items = brokers.split(",") if isinstance(brokers, str) else list(brokers)
    addresses = [parse_address(item) for item in items if item.strip()]
    if not addresses:
        raise ValueError("the broker list is empty")
    return addresses


class Cluster:
    def __init__(self, brokers: str | Sequence[str], *, token: str | None = None,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 5.0,
                 retry: RetryPolicy | None = None,
                 response_bytes_max: int = RESPONSE_BYTES_MAX_DEFAULT) -> None:
        self._bootstrap = parse_brokers(brokers)
        self._token = token
        self.request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        self._response_bytes_max = response_bytes_max
        self._lock = threading.Lock()
        self._connections: dict[Address, BrokerConnection] = {}
        self._leaders: dict[tuple[str, int], Address] = {}
        self._partition_counts: dict[str, int] = {}
        self._last_good = 0  # index into the bootstrap list
        # Where requests without a partition (create/delete topic) go: the broker a NOT_LEADER
        # answer named, i.e. the cluster's leader; None: any broker.
        self._controller: Address | None = None

    # -- the retry loop ----------------------------------------------------------------------

    def call(self, request, *, route: tuple[str, int] | None = None,
             timeout_s: float | None = None,
             ok_after_delivery: tuple[type[KaskaError], ...] = (),
             no_retry: tuple[type[KaskaError], ...] = ()):
        """Send `request` to the leader of `route` (or any broker) and return its response,
        retrying retriable errors with backoff up to `retry.retries_max` times.

        `ok_after_delivery`: errors that mean success when an earlier attempt may already
        have been applied (a retried produce answered DuplicateSequence); the call then
        returns None. `no_retry`: retriable errors this caller wants at once. A final error
        carries `maybe_delivered` for the caller.
        """
        maybe_delivered = False
        attempt = 0
        while True:
            address = None
            try:
                address = self._leader(*route) if route else self._controller_or_any()
                return self._connection(address).request(request, timeout_s)
            except KaskaError as error:
                if maybe_delivered and isinstance(error, ok_after_delivery):
                    return None
                maybe_delivered = maybe_delivered or isinstance(error, MAYBE_DELIVERED)
                if (not error.retriable or isinstance(error, no_retry)
                        or attempt >= self.retry.retries_max):
                    error.maybe_delivered = maybe_delivered
                    raise
                self._recover(error, route, address)
                pause_s = self.retry.backoff_s(attempt)
                log.info("retry %d of %s in %.2f s after %s: %s", attempt + 1,
                         type(request).__name__, pause_s, type(error).__name__, error)
                time.sleep(pause_s)
                attempt += 1

    def _recover(self, error: KaskaError, route, address: Address | None) -> None:
        if isinstance(error, BrokerUnavailableError | ConnectionLostError |
                      RequestTimedOutError | InvalidResponseError) and address is not None:
            self._drop(address)
        elif isinstance(error, NotLeaderError) and route is None:
            with self._lock:
                self._controller = parse_address(error.leader) if error.leader else None
        elif isinstance(error, NotLeaderError):
            hint = error.leader
            with self._lock:
                self._leaders.pop(route, None)
                if hint:
                    self._leaders[route] = parse_address(hint)
        elif isinstance(error, UnknownTopicOrPartitionError) and route is not None:
            with self._lock:
                self._leaders.pop(route, None)
                self._partition_counts.pop(route[0], None)

    # -- connections -------------------------------------------------------------------------

    def _connection(self, address: Address) -> BrokerConnection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is not None and connection.alive:
                return connection
        connection = BrokerConnection(
            address, token=self._token, connect_timeout_s=self._connect_timeout_s,
            request_timeout_s=self.request_timeout_s,
            response_bytes_max=self._response_bytes_max)
        with self._lock:
            old = self._connections.get(address)
            if old is not None and old.alive:
                # Another thread connected meanwhile: keep one connection per broker.
                connection.close("duplicate connection")
                return old
            self._connections[address] = connection
        return connection

    def _controller_or_any(self) -> Address:
        with self._lock:
            controller = self._controller
        return controller if controller is not None else self._any_broker()

    def _drop(self, address: Address) -> None:
        with self._lock:
            if self._controller == address:
                self._controller = None
            if self._bootstrap[self._last_good] == address:
                # A paused broker still accepts connections: move on rather than retry it.
                self._last_good = (self._last_good + 1) % len(self._bootstrap)
            connection = self._connections.pop(address, None)
            for route in [r for r, a in self._leaders.items() if a == address]:
                del self._leaders[route]
        if connection is not None:
            connection.close("dropped after an error")

    def _any_broker(self) -> Address:
        """A bootstrap broker we can connect to, starting with the last one that worked."""
        count = len(self._bootstrap)
        last_error: KaskaError | None = None
        for i in range(count):
            index = (self._last_good + i) % count
            address = self._bootstrap[index]
            try:
                self._connection(address)
            except BrokerUnavailableError as error:
                last_error = error
                continue
            self._last_good = index
            return address
        raise BrokerUnavailableError(f"no broker of {self._describe_bootstrap()} answers: "
                                     f"{last_error}")

    def _describe_bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self._bootstrap)

    # -- metadata ----------------------------------------------------------------------------

    def _leader(self, topic: str, partition: int) -> Address:
        with self._lock:
            address = self._leaders.get((topic, partition))
        if address is None:
            self.refresh_metadata(topic)
            with self._lock:
                address = self._leaders.get((topic, partition))
            if address is None:
                raise UnknownTopicOrPartitionError(f"no leader known for {topic}/{partition}")
        return address

    def refresh_metadata(self, topic: str) -> None:
        """Ask any broker who leads the partitions of `topic` (one attempt)."""
        response = self._connection(self._any_broker()).request(MetadataRequest((topic,)))
        self._absorb_metadata(topic, response)

    def _absorb_metadata(self, topic: str, response) -> None:
        partitions = response.topics.get(topic)
        if partitions is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        with self._lock:
            self._partition_counts[topic] = len(partitions)
            for info in partitions:
                broker = response.broker(info.leader_id)
                if info.leader_id == NO_LEADER or broker is None:
                    self._leaders.pop((topic, info.partition), None)
                else:
                    self._leaders[(topic, info.partition)] = (broker.host, broker.port)

    def partition_count(self, topic: str) -> int:
        """Partitions of `topic` (cached; asked with retries when unknown)."""
        with self._lock:
            count = self._partition_counts.get(topic)
        if count is not None:
            return count
        self._absorb_metadata(topic, self.call(MetadataRequest((topic,))))
        with self._lock:
            return self._partition_counts[topic]

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()
