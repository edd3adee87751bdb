"""A deterministic in-memory network of bully nodes, stepped with explicit time (no sleeping)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from healthchecker.bully import (
    Action,
    ElectionConfig,
    ElectionState,
    Kind,
    Received,
    Role,
    Send,
    Start,
    Tick,
    initial_state,
    step,
)

CONFIG_DEFAULTS = dict(
    healthcheck_interval_s=0.5,
    healthcheck_misses_max=3,
    answer_timeout_s=0.4,
    coordinator_timeout_s=0.8,
    announce_interval_s=1.0,
)


@dataclass
class Packet:
    to: int
    sender: int
    message: object


@dataclass
class Cluster:
    ids: tuple[int, ...]
    now: float = 0.0
    states: dict[int, ElectionState] = field(default_factory=dict)
    alive: set[int] = field(default_factory=set)
    in_flight: list[Packet] = field(default_factory=list)
    notifications: list[tuple[float, int, Action]] = field(default_factory=list)

    @classmethod
    def of(cls, ids: Iterable[int], **config) -> Cluster:
        ids = tuple(ids)
        cluster = cls(ids=ids)
        settings = {**CONFIG_DEFAULTS, **config}
        for node in ids:
            peers = frozenset(i for i in ids if i != node)
            cluster.states[node] = initial_state(ElectionConfig(node, peers, **settings))
        return cluster

    # --- driving nodes ---------------------------------------------------------------------
    def apply(self, node: int, event) -> None:
        if node not in self.alive:
            return
        self.states[node], actions = step(self.states[node], event, self.now)
        for action in actions:
            if isinstance(action, Send):
                self.in_flight.append(Packet(action.to, node, action.message))
            else:
                self.notifications.append((self.now, node, action))

    def start(self, node: int) -> None:
        """Start (or restart) a node with a fresh state, as a new process would."""
        self.alive.add(node)
        self.states[node] = initial_state(self.states[node].config)
        self.apply(node, Start())

    def crash(self, node: int) -> None:
        self.alive.discard(node)

    def tick(self, node: int | None = None) -> None:
        for target in [node] if node is not None else sorted(self.alive):
            self.apply(target, Tick())

    def advance(self, seconds: float) -> None:
        self.now += seconds

    # --- the network -----------------------------------------------------------------------
    def deliver(self, index: int) -> None:
        packet = self.in_flight.pop(index)
        if packet.to in self.alive:
            self.apply(packet.to, Received(packet.message))

    def drop(self, index: int) -> None:
        self.in_flight.pop(index)

    def deliver_all(
        self, lose: Callable[[Packet], bool] = lambda packet: False, rounds_max: int = 100
    ) -> None:
        for _ in range(rounds_max):
            if not self.in_flight:
                return
            batch, self.in_flight = self.in_flight, []
            for packet in batch:
                if not lose(packet) and packet.to in self.alive:
                    self.apply(packet.to, Received(packet.message))
        raise AssertionError("the network did not quiesce")

    def run(self, seconds: float, step_s: float = 0.05, lose=lambda packet: False) -> None:
        """Advance time in steps, ticking every live node and delivering everything each step."""
        steps = round(seconds / step_s)
        for _ in range(steps):
            self.advance(step_s)
            self.tick()
            self.deliver_all(lose)

    # --- observations ----------------------------------------------------------------------
    def leaders(self) -> set[int]:
        return {node for node in self.alive if self.states[node].role is Role.LEADER}

    def known_leaders(self) -> dict[int, int | None]:
        return {node: self.states[node].leader_id for node in sorted(self.alive)}

    def role(self, node: int) -> Role:
        return self.states[node].role

    def sent(self, kind: Kind) -> list[Packet]:
        return [packet for packet in self.in_flight if packet.message.kind is kind]


def lose_between(a: int, b: int) -> Callable[[Packet], bool]:
    return lambda packet: {packet.to, packet.sender} == {a, b}
