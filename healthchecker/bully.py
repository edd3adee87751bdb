"""The bully election as a pure state machine: `step(state, event, now) -> (state, actions)`.

No sockets, clocks or randomness here: the transport delivers `Received` events, a timer loop
delivers `Tick` events, and the caller carries out the returned `Send` actions. Time is a float
in seconds from any monotonic clock, passed in as `now`.

Protocol (highest live id wins):
- A node that starts (or restarts, or comes back) runs an election: ELECTION to every higher id.
  With no higher id it is the leader at once. Otherwise it waits `answer_timeout_s` for an ANSWER;
  none means every higher node is dead, so it becomes the leader. An ANSWER means a higher node
  took over; it then waits `coordinator_timeout_s` for a COORDINATOR and starts over without one.
- The leader sends COORDINATOR to every peer when elected and again every
  `announce_interval_s`, so a node that lost the first announcement, or a lower node that
  declared itself leader while packets were lost, learns the truth and steps down.
- A node answers an ELECTION from a lower id and runs its own election (a leader just reasserts
  itself with COORDINATOR). A COORDINATOR from a higher id is obeyed; one from a lower id is
  bullied (the leader reasserts, anyone else runs an election).
- A follower sends HEALTHCHECK to its leader every `healthcheck_interval_s`; the reply names the
  replier's own leader. A leader silent for `healthcheck_misses_max` intervals, or a reply saying
  "I am not the leader", starts an election.
- `PeerDown(peer)` is outside evidence that a peer process is gone (its heartbeat connection
  closed without a goodbye): a follower of that peer starts an election at once instead of
  waiting out the silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from healthchecker.errors import HealthCheckerConfigError, require_int_at_least, require_positive_s


class ElectionConfigError(HealthCheckerConfigError):
    """An election setting out of range (a zero interval, a node among its own peers, ...)."""


class Kind(StrEnum):
    ELECTION = "ELECTION"
    ANSWER = "ANSWER"
    COORDINATOR = "COORDINATOR"
    HEALTHCHECK = "HEALTHCHECK"
    HEALTHCHECK_REPLY = "HEALTHCHECK_REPLY"


class Role(StrEnum):
    IDLE = "idle"  # not started: ignores everything but Start
    ELECTING = "electing"  # sent ELECTION, waiting for an ANSWER
    AWAITING_COORDINATOR = "awaiting_coordinator"  # answered by a higher node
    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class Message:
    kind: Kind
    sender: int
    leader: int | None = None  # HEALTHCHECK_REPLY only: the replier's current leader


# Events
@dataclass(frozen=True, slots=True)
class Start:
    pass


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class Received:
    message: Message


@dataclass(frozen=True, slots=True)
class PeerDown:
    peer: int


Event = Start | Tick | Received | PeerDown


# Actions
@dataclass(frozen=True, slots=True)
class Send:
    to: int
    message: Message


@dataclass(frozen=True, slots=True)
class BecameLeader:
    pass


@dataclass(frozen=True, slots=True)
class BecameFollower:
    leader_id: int


@dataclass(frozen=True, slots=True)
class LeaderLost:
    """The node no longer knows a leader (it runs an election); `previous` may be itself."""

    previous: int


Action = Send | BecameLeader | BecameFollower | LeaderLost


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    node_id: int
    peer_ids: frozenset[int]
    healthcheck_interval_s: float = 1.0
    healthcheck_misses_max: int = 3
    answer_timeout_s: float = 1.0
    coordinator_timeout_s: float = 2.0
    announce_interval_s: float = 2.0

    def __post_init__(self) -> None:
        error = ElectionConfigError
        require_int_at_least(error, "node_id", self.node_id, 0)
        for peer in self.peer_ids:
            require_int_at_least(error, "a peer id", peer, 0)
        if self.node_id in self.peer_ids:
            raise error(f"node {self.node_id} is among its own peers {sorted(self.peer_ids)}")
        for name in ("healthcheck_interval_s", "answer_timeout_s", "coordinator_timeout_s",
                     "announce_interval_s"):
            require_positive_s(error, name, getattr(self, name))
        require_int_at_least(error, "healthcheck_misses_max", self.healthcheck_misses_max, 1)

    @property
    def leader_silence_s_max(self) -> float:
        return self.healthcheck_interval_s * self.healthcheck_misses_max

    @property
    def higher_ids(self) -> tuple[int, ...]:
        return tuple(sorted(peer for peer in self.peer_ids if peer > self.node_id))


@dataclass(frozen=True, slots=True)
class ElectionState:
    config: ElectionConfig
    role: Role = Role.IDLE
    leader_id: int | None = None
    deadline_at: float = 0.0  # answer deadline (ELECTING) or coordinator deadline (AWAITING_...)
    leader_heard_at: float = 0.0
    next_ping_at: float = 0.0
    next_announce_at: float = 0.0
    elections_started: int = field(default=0, compare=False)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER


def initial_state(config: ElectionConfig) -> ElectionState:
    return ElectionState(config=config)


def step(state: ElectionState, event: Event, now: float) -> tuple[ElectionState, list[Action]]:
    """Advance one node by one event at time `now`; returns the new state and what to do."""
    if isinstance(event, Start):
        return _start_election(initial_state(state.config), now)
    if state.role is Role.IDLE:
        return state, []
    if isinstance(event, Tick):
        return _on_tick(state, now)
    if isinstance(event, PeerDown):
        if state.role is Role.FOLLOWER and event.peer == state.leader_id:
            return _start_election(state, now)
        return state, []
    assert isinstance(event, Received), f"unknown event {event!r}"
    message = event.message
    if message.sender == state.node_id or message.sender not in state.config.peer_ids:
        return state, []
    return _HANDLERS[message.kind](state, message, now)


def next_timer_at(state: ElectionState) -> float | None:
    """When the node next needs a Tick (the edge may tick more often; never less)."""
    if state.role in (Role.ELECTING, Role.AWAITING_COORDINATOR):
        return state.deadline_at
    if state.role is Role.FOLLOWER:
        return min(state.next_ping_at, state.leader_heard_at + state.config.leader_silence_s_max)
    if state.role is Role.LEADER:
        return state.next_announce_at
    return None


def _lost_leader(state: ElectionState) -> list[Action]:
    return [] if state.leader_id is None else [LeaderLost(previous=state.leader_id)]


def _start_election(state: ElectionState, now: float) -> tuple[ElectionState, list[Action]]:
    actions = _lost_leader(state)
    higher = state.config.higher_ids
    state = replace(state, elections_started=state.elections_started + 1)
    if not higher:
        new_state, leader_actions = _become_leader(replace(state, leader_id=None), now)
        return new_state, actions + leader_actions
    ping = Message(Kind.ELECTION, state.node_id)
    actions += [Send(peer, ping) for peer in higher]
    state = replace(
        state, role=Role.ELECTING, leader_id=None, deadline_at=now + state.config.answer_timeout_s
    )
    return state, actions


def _announce(state: ElectionState, now: float) -> tuple[ElectionState, list[Action]]:
    announcement = Message(Kind.COORDINATOR, state.node_id)
    actions: list[Action] = [Send(peer, announcement) for peer in sorted(state.config.peer_ids)]
    return replace(state, next_announce_at=now + state.config.announce_interval_s), actions


def _become_leader(state: ElectionState, now: float) -> tuple[ElectionState, list[Action]]:
    was_leader = state.role is Role.LEADER
    state, actions = _announce(replace(state, role=Role.LEADER, leader_id=state.node_id), now)
    return state, actions if was_leader else [BecameLeader(), *actions]


def _follow(state: ElectionState, leader_id: int, now: float) -> tuple[ElectionState, list[Action]]:
    changed = state.role is not Role.FOLLOWER or state.leader_id != leader_id
    new_state = replace(state, role=Role.FOLLOWER, leader_id=leader_id, leader_heard_at=now)
    if not changed:
        return new_state, []
    # First ping on the next tick, so `healthcheck_misses_max` pings fit in the silence window.
    return replace(new_state, next_ping_at=now), [BecameFollower(leader_id)]


def _on_tick(state: ElectionState, now: float) -> tuple[ElectionState, list[Action]]:
    if state.role is Role.ELECTING and now >= state.deadline_at:
        return _become_leader(state, now)
    if state.role is Role.AWAITING_COORDINATOR and now >= state.deadline_at:
        return _start_election(state, now)
    if state.role is Role.FOLLOWER:
        if now - state.leader_heard_at >= state.config.leader_silence_s_max:
            return _start_election(state, now)
        if now >= state.next_ping_at:
            assert state.leader_id is not None
            next_ping_at = now + state.config.healthcheck_interval_s
            ping = Send(state.leader_id, Message(Kind.HEALTHCHECK, state.node_id))
            return replace(state, next_ping_at=next_ping_at), [ping]
    if state.role is Role.LEADER and now >= state.next_announce_at:
        return _announce(state, now)
    return state, []


def _on_election(state: ElectionState, message: Message, now: float):
    if message.sender > state.node_id:
        return state, []  # only lower ids send us ELECTION; a higher one is stale or confused
    answer: list[Action] = [Send(message.sender, Message(Kind.ANSWER, state.node_id))]
    if state.role is Role.LEADER:
        new_state, actions = _announce(state, now)
        return new_state, answer + actions
    if state.role in (Role.ELECTING, Role.AWAITING_COORDINATOR):
        return state, answer
    new_state, actions = _start_election(state, now)
    return new_state, answer + actions


def _on_answer(state: ElectionState, message: Message, now: float):
    if state.role is not Role.ELECTING or message.sender < state.node_id:
        return state, []
    deadline_at = now + state.config.coordinator_timeout_s
    return replace(state, role=Role.AWAITING_COORDINATOR, deadline_at=deadline_at), []


def _on_coordinator(state: ElectionState, message: Message, now: float):
    if message.sender > state.node_id:
        return _follow(state, message.sender, now)
    if state.role is Role.LEADER:
        return _announce(state, now)
    if state.role in (Role.ELECTING, Role.AWAITING_COORDINATOR):
        return state, []
    return _start_election(state, now)


def _on_healthcheck(state: ElectionState, message: Message, now: float):
    reply = Message(Kind.HEALTHCHECK_REPLY, state.node_id, leader=state.leader_id)
    return state, [Send(message.sender, reply)]


def _on_healthcheck_reply(state: ElectionState, message: Message, now: float):
    if state.role is not Role.FOLLOWER or message.sender != state.leader_id:
        return state, []
    if message.leader == message.sender:
        return replace(state, leader_heard_at=now), []
    return _start_election(state, now)


_HANDLERS = {
    Kind.ELECTION: _on_election,
    Kind.ANSWER: _on_answer,
    Kind.COORDINATOR: _on_coordinator,
    Kind.HEALTHCHECK: _on_healthcheck,
    Kind.HEALTHCHECK_REPLY: _on_healthcheck_reply,
}
