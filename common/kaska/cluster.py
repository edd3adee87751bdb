"""What the admin, producer and consumer share: the bootstrap list, one connection per broker,
who leads which partition (`LeaderTable`: METADATA fenced by leader epoch, refreshed on
NOT_LEADER and unknown-partition answers, NOT_LEADER's leader hint followed at once) and the
retry loop with exponential backoff.

A frozen leader costs seconds, not the request timeout. A SIGSTOPped or cut-off
broker keeps its connections open, so its requests would wait out `request_timeout_s` (30 s)
while the others elect a new leader within 1-3 s. So an answer that is late by
`leader_probe_after_s` (a long poll too: a frozen leader looks like one with nothing to send)
makes the client ask another broker for METADATA every `leader_probe_interval_s`, in turn,
each bounded by `leader_probe_timeout_s`; when one names a newer leader (higher epoch), the
request is abandoned (LeaderMovedError, maybe delivered: idempotence makes the retry safe)
and retried there at once, and the silent broker is shunned (leaders.py). METADATA itself is
asked with the probe's short bound, one broker after another, so a paused broker first in the
bootstrap list costs one bound, not the request timeout.

Thread-safe: one lock guards the connection table and the bootstrap rotation; the leader
table has its own; requests run outside both.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence

from common.address import Address, parse_host_port
from common.kaska.connection import RESPONSE_BYTES_MAX_DEFAULT, BrokerConnection, RequestWatch
from common.kaska.errors import (
    BrokerUnavailableError,
    ConnectionLostError,
    InvalidResponseError,
    KaskaError,
    LeaderMovedError,
    NotLeaderError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from common.kaska.leaders import LeaderTable
from common.kaska.protocol.metadata import MetadataRequest
from common.kaska.retry import RetryPolicy

log = logging.getLogger(__name__)

# Failures after which the request may have reached the broker and been applied.
MAYBE_DELIVERED = (ConnectionLostError, RequestTimedOutError, InvalidResponseError,
                   LeaderMovedError)
# Errors after which the broker is dropped: its connection is closed and the next attempt
# looks elsewhere.
BROKER_FAILED = (BrokerUnavailableError, ConnectionLostError, RequestTimedOutError,
                 InvalidResponseError, LeaderMovedError)
LEADER_PROBE_AFTER_S_DEFAULT = 1.0
LEADER_PROBE_INTERVAL_S_DEFAULT = 0.5
LEADER_PROBE_TIMEOUT_S_DEFAULT = 1.0
# How long a topic missing from METADATA answers is asked for again (a broker's committed view
# lags a create by a replication round trip), and the pause between the asks.
TOPIC_APPEAR_WAIT_S = 2.0
TOPIC_APPEAR_PAUSE_S = 0.05


def parse_brokers(brokers: str | Sequence[str]) -> list[Address]:
    items = brokers.split(",") if isinstance(brokers, str) else list(brokers)
    addresses = [parse_host_port(item) for item in items if item.strip()]
    if not addresses:
        raise ValueError("the broker list is empty")
    return addresses


class Cluster:
    def __init__(self, brokers: str | Sequence[str], *, token: str | None = None,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 5.0,
                 retry: RetryPolicy | None = None,
                 response_bytes_max: int = RESPONSE_BYTES_MAX_DEFAULT,
                 leader_probe_after_s: float = LEADER_PROBE_AFTER_S_DEFAULT,
                 leader_probe_interval_s: float = LEADER_PROBE_INTERVAL_S_DEFAULT,
                 leader_probe_timeout_s: float = LEADER_PROBE_TIMEOUT_S_DEFAULT) -> None:
        if min(leader_probe_after_s, leader_probe_interval_s, leader_probe_timeout_s) <= 0:
            raise ValueError("the leader probe's after, interval and timeout must be > 0 s")
        self._bootstrap = parse_brokers(brokers)
        self._token = token
        self.request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        self._response_bytes_max = response_bytes_max
        self.leader_probe_after_s = leader_probe_after_s
        self.leader_probe_interval_s = leader_probe_interval_s
        self.leader_probe_timeout_s = leader_probe_timeout_s
        self._lock = threading.Lock()
        self._connections: dict[Address, BrokerConnection] = {}
        self.leaders = LeaderTable()
        self._last_good = 0  # index into the bootstrap list
        # Where requests without a partition (create/delete topic) go: the broker a NOT_LEADER
        # answer named, i.e. the cluster's leader; None: any broker.
        self._controller: Address | None = None

    # -- the retry loop ----------------------------------------------------------------------

    def call(self, request, *, route: tuple[str, int] | None = None,
             timeout_s: float | None = None, server_wait_s: float = 0.0,
             ok_after_delivery: tuple[type[KaskaError], ...] = (),
             no_retry: tuple[type[KaskaError], ...] = (),
             check: Callable[[object], None] | None = None):
        """Send `request` to the leader of `route` (or any broker) and return its response,
        retrying retriable errors with backoff up to `retry.retries_max` times.

        `timeout_s` bounds one attempt (default `request_timeout_s`), plus `server_wait_s`,
        the time the request asks the broker to hold it (a long poll). `ok_after_delivery`:
        errors that mean success when an earlier attempt may already have been applied (a
        retried produce answered DuplicateSequence); the call then returns None. `no_retry`:
        retriable errors this caller wants at once. `check(response)` raises the KaskaError
        an answer carries inside its body (a per-partition error code), which is then
        retried or raised like a frame's error. A final error carries `maybe_delivered` for
        the caller.
        """
        maybe_delivered = False
        attempt = 0
        while True:
            address = None
            try:
                address = self._leader(*route) if route else self._controller_or_any()
                attempt_s = (self.request_timeout_s if timeout_s is None else timeout_s) \
                    + server_wait_s
                response = self._connection(address).request(
                    request, attempt_s, watch=self._watch(route, address))
                if check is not None:
                    check(response)
                return response
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
        if isinstance(error, LeaderMovedError) and address is not None:
            self.leaders.mark_silent(address)
        if isinstance(error, BROKER_FAILED) and address is not None:
            self._drop(address)
        elif isinstance(error, NotLeaderError) and route is None:
            hint = parse_host_port(error.leader) if error.leader else None
            with self._lock:
                self._controller = hint
        elif isinstance(error, NotLeaderError):
            self.leaders.follow_hint(route, error.leader, parse_host_port)
        elif isinstance(error, UnknownTopicOrPartitionError) and route is not None:
            self.leaders.forget_topic(route[0])

    # -- the leader probe --------------------------------------------------------------------

    def _watch(self, route, address: Address) -> RequestWatch:
        # A long poll on a healthy leader is probed too (from `leader_probe_after_s`, however
        # long the broker may hold it): a frozen leader looks exactly like one with nothing to
        # send. Each probe asks one other broker, in turn, so an idle poller costs one small
        # METADATA per interval.
        others = self._others(address)
        turn = itertools.count()

        def still_worth_waiting() -> str | None:
            start = next(turn)
            for k in range(len(others)):
                verdict = self._probe(others[(start + k) % len(others)], route, address)
                if verdict is not False:
                    return verdict
            return None

        return RequestWatch(still_worth_waiting, after_s=self.leader_probe_after_s,
                            every_s=self.leader_probe_interval_s)

    def _probe(self, other: Address, route, address: Address) -> str | None | bool:
        """Ask `other` who leads `route` (the cluster when None): why waiting on `address` is
        pointless (`other` names a newer leader), None (it names `address`), or False when
        `other` did not answer or names no leader (the next broker is asked at once)."""
        request = MetadataRequest((route[0],) if route else ())
        try:
            response = self._connection(other, self.leader_probe_timeout_s).request(
                request, self.leader_probe_timeout_s)
        except KaskaError as error:
            log.debug("leader probe at %s:%d: %s", *other, error)
            return False
        if route is None:
            named = self.leaders.absorb_cluster_leader(response)
            if named is None:
                return False
            if named[0] == address:
                return None
            with self._lock:
                self._controller = named[0]
            return (f"{other[0]}:{other[1]} names {named[0][0]}:{named[0][1]} the cluster's "
                    f"leader at epoch {named[1]}")
        try:
            self.leaders.absorb(route[0], response)
        except UnknownTopicOrPartitionError:
            return False  # a lagging broker that has not created the topic yet
        leader = self.leaders.leader(route)
        if leader is None:
            return False  # an election under way there: another broker may know its outcome
        if leader == address:
            return None
        return (f"{other[0]}:{other[1]} names {leader[0]}:{leader[1]} leader of "
                f"{route[0]}/{route[1]} at epoch {self.leaders.epoch(route)}")

    def _others(self, address: Address) -> list[Address]:
        """Every broker the client knows of but `address`: the bootstrap list, then the ones
        METADATA answers listed."""
        known = list(self._bootstrap)
        known += sorted(self.leaders.brokers() - set(known))
        return [other for other in known if other != address]

    # -- connections -------------------------------------------------------------------------

    def _connection(self, address: Address,
                    connect_timeout_s: float | None = None) -> BrokerConnection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is not None and connection.alive:
                return connection
        connection = BrokerConnection(
            address, token=self._token,
            connect_timeout_s=(self._connect_timeout_s if connect_timeout_s is None
                               else min(connect_timeout_s, self._connect_timeout_s)),
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
        self.leaders.forget_address(address)
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
        address = self.leaders.leader((topic, partition))
        if address is None:
            self.refresh_metadata(topic)
            address = self.leaders.leader((topic, partition))
            if address is None:
                # The broker asked knows no leader (an election, or a leader without its
                # lease names none): ask the next one on the retry.
                with self._lock:
                    self._last_good = (self._last_good + 1) % len(self._bootstrap)
                raise UnknownTopicOrPartitionError(f"no leader known for {topic}/{partition}")
        return address

    def refresh_metadata(self, topic: str) -> None:
        """Ask the brokers who leads the partitions of `topic`: one after another, starting
        with the last that worked, each bounded by `leader_probe_timeout_s` (a paused broker
        accepts connections and never answers), until one answers."""
        self.leaders.absorb(topic, self._ask_metadata(MetadataRequest((topic,))))

    def _ask_metadata(self, request: MetadataRequest):
        last_error: KaskaError | None = None
        for _ in range(len(self._bootstrap)):
            address = self._any_broker()
            try:
                return self._connection(address).request(request, self.leader_probe_timeout_s)
            except KaskaError as error:
                if not isinstance(error, BROKER_FAILED):
                    raise
                last_error = error
                self._drop(address)
        raise BrokerUnavailableError(f"no broker of {self._describe_bootstrap()} answered "
                                     f"METADATA: {last_error}")

    def partition_count(self, topic: str) -> int:
        """Partitions of `topic` (cached; asked with retries when unknown). A broker answers
        METADATA from its committed view, which may lag a create by a replication round trip:
        a topic missing from an answer is asked again for `TOPIC_APPEAR_WAIT_S` before
        UnknownTopicOrPartitionError (as Kafka's clients wait for a topic's metadata)."""
        count = self.leaders.partition_count(topic)
        if count is not None:
            return count
        deadline = time.monotonic() + TOPIC_APPEAR_WAIT_S
        while True:
            try:
                self.leaders.absorb(topic, self.call(MetadataRequest((topic,))))
                return self.leaders.partition_count(topic)
            except UnknownTopicOrPartitionError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(TOPIC_APPEAR_PAUSE_S)

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()
