"""Who leads which partition, as one client knows it: METADATA answers and NOT_LEADER hints,
fenced by leader epoch.

Rules (Kafka's client metadata does the same with its leader epochs, KIP-320):
- A METADATA entry for a partition is taken only if its epoch is >= the highest epoch this
  table has seen for that partition. A broker that has not heard of an election yet, or a
  frozen ex-leader that thawed, still names the old leader; taking that would point the client
  back at a broker that cannot commit anything.
- Epochs are never forgotten (forgetting a leader keeps its epoch): a partition's epochs only
  grow, across topic re-creation too (its replication group's journal numbers them all).
  Epochs of different partitions are not compared: partitions of different replication groups
  have leaders of their own, with epochs of their own.
- A broker the client gave up on as silent (`mark_silent`: its request went unanswered while
  another broker named a newer leader) is not followed on a NOT_LEADER hint, which carries no
  epoch (a follower that has not noticed the election names it for another second or two);
  only a METADATA entry naming it with a newer epoch than the partition had when it went silent
  makes it a leader again (a broker elected is alive: it is then followed for every
  partition), or the end of `silence_s` (a broker that restarted with a fresh cluster behind it
  starts over at low epochs; it must not be shunned for good).
- The epoch fence applies while the table knows a leader for the partition. With none known
  (forgotten after a hint or a dropped connection), any answer is better than none: a stale
  one costs one NOT_LEADER and its hint, and a cluster rebuilt from empty data directories,
  whose epochs start over, is followed.
- Every broker a METADATA answer lists is remembered (`brokers`), so a client bootstrapped
  with one address can still ask the others when that one goes silent.

Thread-safety: one lock guards the tables; every method is atomic; nothing waits under it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.protocol.metadata import NO_LEADER, MetadataResponse

Address = tuple[str, int]
Route = tuple[str, int]
EPOCH_UNKNOWN = -1
SILENCE_S_DEFAULT = 10.0


class LeaderTable:
    def __init__(self, silence_s: float = SILENCE_S_DEFAULT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._silence_s = silence_s
        self._clock = clock
        self._lock = threading.Lock()
        self._leaders: dict[Route, Address] = {}
        self._epochs: dict[Route, int] = {}
        self._partition_counts: dict[str, int] = {}
        # address -> (each partition's epoch when it went silent, when the client stops
        # shunning it)
        self._silent: dict[Address, tuple[dict[Route, int], float]] = {}
        self._brokers: set[Address] = set()

    def leader(self, route: Route) -> Address | None:
        with self._lock:
            return self._leaders.get(route)

    def epoch(self, route: Route) -> int:
        with self._lock:
            return self._epochs.get(route, EPOCH_UNKNOWN)

    def partition_count(self, topic: str) -> int | None:
        with self._lock:
            return self._partition_counts.get(topic)

    def brokers(self) -> set[Address]:
        with self._lock:
            return set(self._brokers)

    def absorb(self, topic: str, response: MetadataResponse) -> None:
        """Take `topic`'s entries of a METADATA answer (UnknownTopicOrPartitionError when the
        answer does not hold it)."""
        partitions = response.topics.get(topic)
        if partitions is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        with self._lock:
            self._absorb_brokers_locked(response)
            self._partition_counts[topic] = len(partitions)
            for info in partitions:
                self._absorb_partition_locked(response, (topic, info.partition),
                                              info.leader_id, info.leader_epoch)

    def absorb_cluster_leader(self, response: MetadataResponse) -> tuple[Address, int] | None:
        """The controller an answer names (the metadata group's leader: where topics are
        created and deleted) with its epoch, or None when it names none."""
        with self._lock:
            self._absorb_brokers_locked(response)
        if response.controller_id == NO_LEADER:
            return None
        broker = response.broker(response.controller_id)
        return ((broker.host, broker.port), response.controller_epoch) \
            if broker is not None else None

    def follow_hint(self, route: Route, hint: str | None, parse) -> None:
        """A NOT_LEADER answer for `route`: forget its leader, and follow the broker the answer
        names unless that one went silent."""
        with self._lock:
            self._leaders.pop(route, None)
            if hint:
                address = parse(hint)
                if self._silent_at_locked(address) is None:
                    self._leaders[route] = address

    def forget(self, route: Route) -> None:
        with self._lock:
            self._leaders.pop(route, None)

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            for route in [r for r in self._leaders if r[0] == topic]:
                del self._leaders[route]
            self._partition_counts.pop(topic, None)

    def forget_address(self, address: Address) -> None:
        with self._lock:
            for route in [r for r, a in self._leaders.items() if a == address]:
                del self._leaders[route]

    def mark_silent(self, address: Address) -> None:
        """`address` left a request unanswered while another broker named a newer leader."""
        with self._lock:
            self._silent[address] = (dict(self._epochs), self._clock() + self._silence_s)
            for route in [r for r, a in self._leaders.items() if a == address]:
                del self._leaders[route]

    def _silent_at_locked(self, address: Address) -> dict[Route, int] | None:
        """Each partition's epoch when `address` went silent, or None when it is not (or no
        longer) shunned."""
        entry = self._silent.get(address)
        if entry is None:
            return None
        if self._clock() >= entry[1]:
            del self._silent[address]
            return None
        return entry[0]

    def _absorb_brokers_locked(self, response: MetadataResponse) -> None:
        self._brokers.update((b.host, b.port) for b in response.brokers)

    def _absorb_partition_locked(self, response: MetadataResponse, route: Route,
                                 leader_id: int, epoch: int) -> None:
        if route in self._leaders and epoch < self._epochs.get(route, EPOCH_UNKNOWN):
            return
        self._epochs[route] = epoch
        broker = response.broker(leader_id)
        if leader_id == NO_LEADER or broker is None:
            self._leaders.pop(route, None)
            return
        address = (broker.host, broker.port)
        silent_at = self._silent_at_locked(address)
        if silent_at is not None:
            if epoch <= silent_at.get(route, EPOCH_UNKNOWN):
                self._leaders.pop(route, None)
                return
            del self._silent[address]
        self._leaders[route] = address
