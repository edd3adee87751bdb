"""Consumer groups (Kafka's classic group protocol): membership, generations, the leader's
assignment handed to every member. The coordinator is the broker leading `__offsets`
(coordinator.py); groups live in its memory only -- when the coordinator moves, members get
NOT_COORDINATOR or UNKNOWN_MEMBER_ID and join the new one afresh, which costs one rebalance
and loses no committed offset (those are replicated in `__offsets`).

A group's states and what moves it (Kafka's GroupMetadata):

    EMPTY --join--> PREPARING_REBALANCE --every member joined, or the rebalance deadline-->
    COMPLETING_REBALANCE (generation + 1, a leader, each joiner's answer ready)
    --the leader's SyncGroup--> STABLE (assignments handed out)
    any state --join of a new or changed member, leave, session expiry--> PREPARING_REBALANCE
    (EMPTY when nobody is left)

`Group` is the state machine: plain methods of (state, input, clock) with no locks, sockets or
waits, so that it is tested step by step. `GroupCoordinator` adds the lock, the waits (a
JoinGroup answers when its rebalance completes, a follower's SyncGroup when the leader synced)
and the bounds: at most `GROUPS_MAX` groups of `MEMBERS_MAX` members, session timeouts in
[SESSION_TIMEOUT_MS_MIN, SESSION_TIMEOUT_MS_MAX], rebalance timeouts at most
REBALANCE_TIMEOUT_MS_MAX. Members are expired lazily: any call on a group first drops the
members silent for longer than their session timeout (a member blocked in a join or sync
counts as alive).

The first join of an empty group completes no sooner than `INITIAL_REBALANCE_DELAY_S` (Kafka's
group.initial.rebalance.delay.ms, 3 s): without it a consumer's first assignment races its own
metadata request and every member starting at once costs a rebalance each (kafka-python 3.0
was seen to hang in the second one). Later joins complete as soon as every member rejoined.

Not served: static membership (group instance ids are accepted and ignored), KIP-848's
consumer protocol.

An empty group is forgotten when its last member leaves (its committed offsets stay).

`describe` and `describe_all` copy groups out under the lock for DescribeGroups and ListGroups
(groups_admin.py): state, protocol, and per member the client id and host of its latest join,
its subscription in the chosen protocol and its assignment.

Thread-safety: `Group` none; `GroupCoordinator` one lock and one condition for all groups.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from services.broker.kafka.errors import (
    COORDINATOR_NOT_AVAILABLE,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)

GROUP_MAX_SIZE_REACHED = 81
GROUPS_MAX = 10_000
MEMBERS_MAX = 1_000
SESSION_TIMEOUT_MS_MIN = 1_000
SESSION_TIMEOUT_MS_MAX = 1_800_000
REBALANCE_TIMEOUT_MS_MAX = 300_000
NO_GENERATION = -1
WAKE_INTERVAL_S = 0.5  # waiters re-check expiry and deadlines at least this often
INITIAL_REBALANCE_DELAY_S = 3.0  # Kafka's group.initial.rebalance.delay.ms default


class GroupState(Enum):
    EMPTY = "empty"
    PREPARING_REBALANCE = "preparing_rebalance"
    COMPLETING_REBALANCE = "completing_rebalance"
    STABLE = "stable"


@dataclass(slots=True)
class Member:
    member_id: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: tuple[tuple[str, bytes], ...]
    last_seen_s: float
    joined: bool = False  # has joined the rebalance in progress
    assignment: bytes = b""
    client_id: str = ""  # of its latest JoinGroup, for DescribeGroups
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes  # its subscription in the group's protocol (b"" before one is chosen)
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """What DescribeGroups and ListGroups show of a group, copied under the lock."""

    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error_code: int
    generation: int = NO_GENERATION
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # the leader's only: (member id, metadata)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline_s: float = 0.0
    answers: dict[str, JoinAnswer] = field(default_factory=dict)  # completed joins, unread
    # Kafka's group.initial.rebalance.delay.ms: the first join of an empty group completes no
    # sooner than this, so that members starting together (and a member's own metadata
    # request) land in one rebalance instead of one each.
    initial_delay_s: float = 0.0
    join_not_before_s: float = 0.0

    # -- membership --------------------------------------------------------------------------

    def join(self, member_id: str, new_member_id: Callable[[], str], session_timeout_s: float,
             rebalance_timeout_s: float, protocol_type: str,
             protocols: tuple[tuple[str, bytes], ...], now_s: float,
             client: tuple[str, str] = ("", "")) -> tuple[int, str]:
        """(error code, member id) of a JoinGroup; NONE means: wait for `answers[member_id]`.
        `client`: the joiner's (client id, host), kept for DescribeGroups."""
        if not protocols or (self.members and protocol_type != self.protocol_type):
            return INCONSISTENT_GROUP_PROTOCOL, member_id
        if self.members and not self._common_protocols({name for name, _ in protocols}):
            return INCONSISTENT_GROUP_PROTOCOL, member_id
        if member_id and member_id not in self.members:
            return UNKNOWN_MEMBER_ID, member_id
        if not member_id and len(self.members) >= MEMBERS_MAX:
            return GROUP_MAX_SIZE_REACHED, member_id
        member_id = member_id or new_member_id()
        self.protocol_type = protocol_type
        self.members[member_id] = Member(member_id, session_timeout_s, rebalance_timeout_s,
                                         protocols, now_s, joined=True,
                                         client_id=client[0], client_host=client[1])
        self.answers.pop(member_id, None)
        if self.state is GroupState.EMPTY:
            self.join_not_before_s = now_s + min(self.initial_delay_s, rebalance_timeout_s)
        if self.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(now_s, keep_joined=member_id)
        self.try_complete_join(now_s)
        return NONE, member_id

    def _common_protocols(self, names: set[str]) -> set[str]:
        for member in self.members.values():
            names &= {name for name, _ in member.protocols}
        return names

    def _prepare_rebalance(self, now_s: float, keep_joined: str | None = None) -> None:
        if not self.members:
            self._become_empty()
            return
        self.state = GroupState.PREPARING_REBALANCE
        for member in self.members.values():
            member.joined = member.member_id == keep_joined
        self.rebalance_deadline_s = now_s + max(m.rebalance_timeout_s
                                                for m in self.members.values())

    def _become_empty(self) -> None:
        self.state = GroupState.EMPTY
        self.generation += 1
        self.leader_id = ""
        self.protocol_name = None
        self.protocol_type = None

    def try_complete_join(self, now_s: float) -> bool:
        """End the join phase once every member joined or the deadline passed (dropping the
        members that did not join); True when it ended now."""
        if self.state is not GroupState.PREPARING_REBALANCE:
            return False
        joined = [m for m in self.members.values() if m.joined]
        if now_s < self.rebalance_deadline_s and (len(joined) < len(self.members)
                                                  or now_s < self.join_not_before_s):
            return False
        self.members = {m.member_id: m for m in joined}
        if not joined:
            self._become_empty()
            return True
        self.generation += 1
        if self.leader_id not in self.members:
            self.leader_id = joined[0].member_id
        leader = self.members[self.leader_id]
        common = self._common_protocols({name for name, _ in leader.protocols})
        self.protocol_name = next(name for name, _ in leader.protocols if name in common)
        self.state = GroupState.COMPLETING_REBALANCE
        for member in joined:
            member.joined = False
            member.assignment = b""
            member.last_seen_s = now_s
            self.answers[member.member_id] = JoinAnswer(
                NONE, self.generation, self.protocol_name, self.leader_id, member.member_id,
                self._metadata() if member.member_id == self.leader_id else ())
        return True

    def _metadata(self) -> tuple[tuple[str, bytes], ...]:
        return tuple((m.member_id, dict(m.protocols)[self.protocol_name])
                     for m in self.members.values())

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None,
             now_s: float) -> int:
        """A SyncGroup; NONE means: wait for `sync_answer`."""
        error = self._check_member(member_id, generation)
        if error != NONE:
            return error
        if self.state is GroupState.PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        self.members[member_id].last_seen_s = now_s
        if member_id == self.leader_id and self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                member.assignment = (assignments or {}).get(member.member_id, b"")
            self.state = GroupState.STABLE
        return NONE

    def sync_answer(self, member_id: str, generation: int) -> tuple[int, bytes] | None:
        """(error code, assignment) once the member's SyncGroup can be answered, else None."""
        error = self._check_member(member_id, generation)
        if error == ILLEGAL_GENERATION:
            return REBALANCE_IN_PROGRESS, b""
        if error != NONE:
            return error, b""
        if self.state is GroupState.STABLE:
            return NONE, self.members[member_id].assignment
        if self.state is GroupState.PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS, b""
        return None

    def heartbeat(self, member_id: str, generation: int, now_s: float) -> int:
        error = self._check_member(member_id, generation)
        if error != NONE:
            return error
        self.members[member_id].last_seen_s = now_s
        if self.state is GroupState.PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        return NONE

    def leave(self, member_id: str, now_s: float) -> int:
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        del self.members[member_id]
        self.answers.pop(member_id, None)
        self._prepare_rebalance(now_s)
        self.try_complete_join(now_s)
        return NONE

    def check_commit(self, member_id: str, generation: int) -> int:
        """May this member commit offsets? A commit outside the group protocol (generation -1,
        a consumer that assigns itself) is accepted while the group has no members."""
        if generation < 0 and not member_id:
            return NONE if not self.members else UNKNOWN_MEMBER_ID
        return self._check_member(member_id, generation)

    def expire(self, now_s: float) -> list[str]:
        """Drop the members silent past their session timeout; their ids."""
        gone = [m.member_id for m in self.members.values()
                if now_s - m.last_seen_s > m.session_timeout_s and not m.joined]
        for member_id in gone:
            del self.members[member_id]
            self.answers.pop(member_id, None)
        if gone:
            self._prepare_rebalance(now_s)
            self.try_complete_join(now_s)
        return gone

    def touch(self, member_id: str, now_s: float) -> None:
        """A member blocked in a request is alive."""
        member = self.members.get(member_id)
        if member is not None:
            member.last_seen_s = now_s

    def describe(self) -> GroupDescription:
        protocol = self.protocol_name
        return GroupDescription(
            self.group_id, self.state, self.protocol_type or "", protocol or "",
            tuple(MemberDescription(m.member_id, m.client_id, m.client_host,
                                    dict(m.protocols).get(protocol, b"") if protocol else b"",
                                    m.assignment)
                  for m in self.members.values()))

    def _check_member(self, member_id: str, generation: int) -> int:
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ILLEGAL_GENERATION
        return NONE


class GroupCoordinator:
    """Every group this broker coordinates; the blocking parts of JoinGroup and SyncGroup."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 new_member_id: Callable[[], str] | None = None,
                 initial_rebalance_delay_s: float = INITIAL_REBALANCE_DELAY_S) -> None:
        self._clock = clock
        self._initial_rebalance_delay_s = initial_rebalance_delay_s
        self._new_member_id = new_member_id or (lambda: f"member-{uuid.uuid4()}")
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._groups: dict[str, Group] = {}
        self._stopping = False

    def stop(self) -> None:
        """Wake every waiter; they answer COORDINATOR_NOT_AVAILABLE (clients look again)."""
        with self._lock:
            self._stopping = True
            self._changed.notify_all()

    def _group(self, group_id: str, create: bool) -> Group | None:
        group = self._groups.get(group_id)
        if group is None and create and len(self._groups) < GROUPS_MAX:
            group = self._groups[group_id] = Group(
                group_id, initial_delay_s=self._initial_rebalance_delay_s)
        if group is not None and group.expire(self._clock()):
            self._changed.notify_all()
        return group

    def _forget_if_empty(self, group: Group) -> None:
        """An empty group keeps nothing worth memory (its offsets are in `__offsets`)."""
        if not group.members and self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]

    def join(self, group_id: str, member_id: str, session_timeout_ms: int,
             rebalance_timeout_ms: int, protocol_type: str,
             protocols: tuple[tuple[str, bytes], ...],
             client: tuple[str, str] = ("", "")) -> JoinAnswer:
        if not SESSION_TIMEOUT_MS_MIN <= session_timeout_ms <= SESSION_TIMEOUT_MS_MAX:
            return JoinAnswer(INVALID_SESSION_TIMEOUT, member_id=member_id)
        rebalance_s = min(max(rebalance_timeout_ms, session_timeout_ms),
                          REBALANCE_TIMEOUT_MS_MAX) / 1000
        with self._lock:
            group = self._group(group_id, create=True)
            if group is None:
                return JoinAnswer(GROUP_MAX_SIZE_REACHED, member_id=member_id)
            error, member_id = group.join(member_id, self._new_member_id,
                                          session_timeout_ms / 1000, rebalance_s,
                                          protocol_type, protocols, self._clock(), client)
            self._changed.notify_all()
            if error != NONE:
                return JoinAnswer(error, member_id=member_id)
            return self._await_join(group, member_id)

    def _await_join(self, group: Group, member_id: str) -> JoinAnswer:
        while True:
            answer = group.answers.pop(member_id, None)
            if answer is not None:
                return answer
            if self._stopping:
                return JoinAnswer(COORDINATOR_NOT_AVAILABLE, member_id=member_id)
            if member_id not in group.members:
                return JoinAnswer(UNKNOWN_MEMBER_ID, member_id=member_id)
            now = self._clock()
            group.touch(member_id, now)
            if group.try_complete_join(now):
                self._changed.notify_all()
                continue
            next_check_s = group.join_not_before_s if now < group.join_not_before_s \
                else group.rebalance_deadline_s
            self._changed.wait(min(WAKE_INTERVAL_S, max(0.0, next_check_s - now)))

    def sync(self, group_id: str, member_id: str, generation: int,
             assignments: dict[str, bytes] | None) -> tuple[int, bytes]:
        with self._lock:
            group = self._group(group_id, create=False)
            if group is None:
                return UNKNOWN_MEMBER_ID, b""
            error = group.sync(member_id, generation, assignments, self._clock())
            self._changed.notify_all()
            if error != NONE:
                return error, b""
            while True:
                answer = group.sync_answer(member_id, generation)
                if answer is not None:
                    return answer
                if self._stopping:
                    return COORDINATOR_NOT_AVAILABLE, b""
                group.touch(member_id, self._clock())
                self._changed.wait(WAKE_INTERVAL_S)
                if group.expire(self._clock()):
                    self._changed.notify_all()

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> int:
        with self._lock:
            group = self._group(group_id, create=False)
            return UNKNOWN_MEMBER_ID if group is None else \
                group.heartbeat(member_id, generation, self._clock())

    def leave(self, group_id: str, member_id: str) -> int:
        with self._lock:
            group = self._group(group_id, create=False)
            if group is None:
                return UNKNOWN_MEMBER_ID
            error = group.leave(member_id, self._clock())
            self._forget_if_empty(group)
            self._changed.notify_all()
            return error

    def check_commit(self, group_id: str, member_id: str, generation: int) -> int:
        with self._lock:
            group = self._group(group_id, create=False)
            if group is None:
                return NONE if generation < 0 else UNKNOWN_MEMBER_ID
            return group.check_commit(member_id, generation)

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group as it is now (expired members dropped first); None when it has no
        members (forgotten, or never joined)."""
        with self._lock:
            group = self._group(group_id, create=False)
            return None if group is None else group.describe()

    def describe_all(self) -> list[GroupDescription]:
        """Every group with members, as `describe` shows them."""
        with self._lock:
            return [group.describe() for group_id in list(self._groups)
                    if (group := self._group(group_id, create=False)) is not None]
