"""The replication state machine: Raft over the journal, pull-based like KRaft. Pure.

`step(config, state, event, now, rng) -> (state, actions)`: no sockets, no clock, no files.
The broker's replication loop (`node.py`) feeds it events and carries out the actions in order
(a `PersistQuorum` always comes before the answer or request that depends on it).

Rules (docs/replication.md has the why):
- one vote per epoch, persisted before it is answered; granted only to a candidate whose
  journal is at least as complete, `(last_epoch, end) >= own`;
- pre-vote (Raft §9.6): a broker whose election timer fires first asks whether it *could*
  win, without raising its epoch; only a majority of yes starts the real election. A broker
  cut off from the others therefore never inflates its epoch, and cannot disrupt the cluster
  when it returns;
- a follower or leader that heard from a live quorum less than `election_timeout_min_s` ago
  ignores vote requests (Raft §4.2.3), so a rejoining broker cannot depose a healthy leader;
- a candidate wins with a majority; a new leader appends a NOOP entry of its epoch;
- the leader commits index n once a majority holds it and n > epoch_start (its NOOP): only
  entries of its own epoch are counted (Raft §5.4.2); the leader itself holds the entries below
  `synced_end` when one is kept (fsync policy `entry`: only what it fsynced counts), else its
  whole journal;
- a leader not fetched from by a majority within `quorum_timeout_s` steps down;
- leader lease (Raft thesis §6.4, etcd's CheckQuorum + lease read): a follower refuses votes
  for `election_timeout_min_s` after it last heard from its leader (the rule above), so no
  other leader can be elected before then. The leader knows a follower heard from it at time
  t (its own clock) only once the follower's NEXT fetch arrives on the same connection as the
  answer it sent at t (the node drops the connection on any failed fetch, so that fetch proves
  the answer was read: `FetchRequest.confirmed_s`). It holds the lease while a majority,
  itself included, confirmed within `lease_timeout_s` (< `election_timeout_min_s`, with a
  clock-rate margin) and its own epoch's NOOP is committed (its commit index is no older than
  its predecessor's); `holds_lease(config, state, now)`. A follower that hears from a live
  leader does not adopt a higher epoch from another follower's fetch (that would end its
  refusal early). Limit: a follower restarted within the lease forgets its refusal (as in
  etcd); refusing votes after every restart cost the simulated clusters a fifth of their
  commits, so it is documented instead (docs/replication.md);
- followers fetch `(fetch_end, last_fetched_epoch)`; the leader answers entries, or where the
  follower's journal diverges (OffsetsForLeaderEpoch), and the follower truncates there;
- the leader notes when each follower last held its whole journal (`caught_up_s`, Kafka's
  lastCaughtUpTime, see `_note_follower_caught_up`); in_sync.py derives the in-sync replicas
  from it. It decides nothing here: commit and lease count `match` and `heard_s`;
- a follower's commit index counts only entries known to match the leader: the prefix the
  leader's answer vouched for plus the entries appended from that answer (Raft Figure 2:
  min(leaderCommit, index of the last NEW entry)), never whatever else its journal holds (a
  deposed leader's tail that its state machine had not been told of yet);
- a follower whose fetch_end lies below the leader's snapshot (the compacted prefix, `start`)
  and does not diverge is answered SNAPSHOT (Raft §7's InstallSnapshot): it installs the
  snapshot and fetches on from its end, where its commit index may move up to;
- a divergence the follower cannot act on (it lies below its commit index) is reported
  (`StaleDivergence`: logged and counted by the node), never dropped silently;
- leadership transfer (Raft thesis §3.10): a leader told to hand over
  (`TransferLeadership`, e.g. on SIGTERM) stops holding its lease at once (it answers and
  takes nothing as leader from then on), keeps replicating, and answers the chosen voter's
  first fetch that holds its whole journal `TIMEOUT_NOW`, stepping down in the same step. The
  voter starts an election at once (no pre-vote) and its vote requests say `transfer`: voters
  grant them even while they hear from the leader, since that leader gave up its lease before
  any such request could exist. A transfer that found no caught-up voter by
  `transfer_deadline_s` is abandoned and the leader serves on (no TIMEOUT_NOW was sent, so no
  transfer vote can exist); once TIMEOUT_NOW is sent it never leads that epoch again;
- learners (docs/replication.md "Membership and identity"): a broker whose data directory is new
  (it may have lost its state: voted in an epoch it forgot, held entries a leader counted)
  fetches like a follower but grants no vote, starts no pre-vote or election, and the leader
  counts neither its match nor its fetches (commit, check quorum). It becomes a voter
  (`BecomeVoter`) once it has heard from every other voter and either none of them has history
  (epoch 0: the cluster is being formed) or its commit index reached a commit of its leader that
  covers an entry of the leader's own epoch (a leader's commit index before that may lag what
  was committed) and its epoch is the highest any voter holds (every epoch it could have voted
  in was some candidate's); it then counts itself voted in that epoch, since it may have been. A
  leader that sees a peer's broker incarnation change forgets that peer's match.

Indexes are journal entry indexes, dense from 0; `end` is the next index; `commit` is the
end of the committed prefix.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

NO_EPOCH = -1


# A leader's lease is measured on its clock, a follower's vote refusal on its own: the lease
# is at most this fraction of election_timeout_min_s, which absorbs clock rates differing by
# up to 5 % (real monotonic clocks differ by well under 0.1 %).
LEASE_FRACTION_MAX = 0.9
LEASE_FRACTION_DEFAULT = 0.8


class RaftConfigError(ValueError):
    """A replication setting that cannot work (empty quorum, timeouts out of order...)."""


class Role(Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: int
    voters: frozenset[int]
    election_timeout_min_s: float = 1.0
    election_timeout_max_s: float = 2.0
    quorum_timeout_s: float = 2.0
    # None: LEASE_FRACTION_DEFAULT of election_timeout_min_s.
    lease_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.node_id not in self.voters:
            raise RaftConfigError(f"node {self.node_id} is not among the voters "
                                  f"{sorted(self.voters)}")
        if not 0 < self.election_timeout_min_s <= self.election_timeout_max_s:
            raise RaftConfigError("need 0 < election_timeout_min_s <= election_timeout_max_s, "
                                  f"got {self.election_timeout_min_s}, "
                                  f"{self.election_timeout_max_s}")
        if self.quorum_timeout_s < self.election_timeout_min_s:
            raise RaftConfigError("quorum_timeout_s must be >= election_timeout_min_s, or a "
                                  "leader steps down before followers would elect anew")
        if self.lease_timeout_s is None:
            object.__setattr__(self, "lease_timeout_s",
                               LEASE_FRACTION_DEFAULT * self.election_timeout_min_s)
        if not 0 < self.lease_timeout_s <= LEASE_FRACTION_MAX * self.election_timeout_min_s:
            raise RaftConfigError(
                f"need 0 < lease_timeout_s <= {LEASE_FRACTION_MAX} * election_timeout_min_s "
                f"(a clock-rate margin), got {self.lease_timeout_s} with "
                f"election_timeout_min_s {self.election_timeout_min_s}: a longer lease could "
                "outlast the followers' vote refusal, and two leaders would answer")

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def peers(self) -> frozenset[int]:
        return self.voters - {self.node_id}


@dataclass(frozen=True, slots=True)
class LogView:
    """What the state machine knows of the journal: its end, its epoch cache (compacted
    entries included) and `start`, the end of its snapshot (entries below it are compacted:
    only committed ones ever are)."""

    end: int = 0
    epochs: tuple[tuple[int, int], ...] = ()  # (epoch, start index), ascending
    start: int = 0

    @property
    def last_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else 0

    def end_of_epoch(self, epoch: int) -> tuple[int, int]:
        """(e, end): the largest epoch e <= `epoch` holding entries here and the end of its
        entries; (NO_EPOCH, 0) when there is none (nothing here can match)."""
        for i in range(len(self.epochs) - 1, -1, -1):
            found, _start = self.epochs[i]
            if found <= epoch:
                end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.end
                return found, end
        return NO_EPOCH, 0

    def appended(self, epoch: int, count: int = 1) -> LogView:
        assert count >= 1 and epoch >= self.last_epoch
        epochs = self.epochs if epoch == self.last_epoch and self.epochs \
            else (*self.epochs, (epoch, self.end))
        return LogView(self.end + count, epochs, self.start)

    def truncated(self, end: int) -> LogView:
        end = max(self.start, min(end, self.end))
        return LogView(end, tuple(pair for pair in self.epochs if pair[1] < end), self.start)


def _frozen(mapping: dict) -> MappingProxyType:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class Rejoin:
    """A learner's progress toward a vote: the epochs it heard from each other voter, and the
    commit index it must reach: the first commit the leader of `catch_up_epoch` sent it that
    covers an entry of that epoch (None: not yet)."""

    heard: MappingProxyType = field(default_factory=lambda: _frozen({}))  # peer -> epoch
    catch_up_commit: int | None = None
    catch_up_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class RaftState:
    role: Role = Role.FOLLOWER
    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None
    log: LogView = LogView()
    commit: int = 0
    election_deadline_s: float = 0.0
    last_leader_contact_s: float = float("-inf")  # follower: last answer from the leader
    votes: frozenset[int] = frozenset()  # candidate, or pre-vote round of a follower
    pre_voting: bool = False  # a follower asking whether it could win epoch + 1
    epoch_start: int = 0  # leader: index of its NOOP
    match: MappingProxyType = field(default_factory=lambda: _frozen({}))  # leader: peer → end
    last_fetch_s: MappingProxyType = field(default_factory=lambda: _frozen({}))  # leader
    # Leader: peer → the latest time (this broker's clock) at which the peer is known to have
    # heard from it as leader of this epoch (FetchRequest.confirmed_s); the lease.
    heard_s: MappingProxyType = field(default_factory=lambda: _frozen({}))
    # Leader: peer → the latest time (this broker's clock) at which the peer is known to have
    # held this leader's whole journal (Kafka's lastCaughtUpTime; in_sync.py reads it), and
    # peer → this leader's journal end when that peer's last fetch arrived.
    caught_up_s: MappingProxyType = field(default_factory=lambda: _frozen({}))
    end_at_fetch: MappingProxyType = field(default_factory=lambda: _frozen({}))
    # The end of this broker's fsynced journal prefix (fsync policy `entry`): a leader counts
    # only it toward the majority. None: no fsync policy, the whole journal counts (Kafka's
    # durability through replication alone).
    synced_end: int | None = None
    rejoin: Rejoin | None = None  # not None: a learner (no vote yet)
    # Leader: each peer's broker incarnation as last seen, and the peers fetching as learners.
    incarnations: MappingProxyType = field(default_factory=lambda: _frozen({}))
    learners: frozenset[int] = frozenset()
    # Leader handing over (TransferLeadership): to whom, and until when it tries. While set, it
    # holds no lease.
    transfer_to: int | None = None
    transfer_deadline_s: float = float("-inf")

    @property
    def learner(self) -> bool:
        return self.rejoin is not None


# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """`pre_vote`: "would you vote for me in `epoch`?" -- answered without any state change.
    `transfer`: the candidate stands because its leader handed over (TIMEOUT_NOW): granted even
    by a voter that hears from that leader."""

    candidate: int
    epoch: int
    last_epoch: int
    end: int
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """`epoch`: the voter's epoch (for a granted pre-vote: the epoch asked about)."""

    voter: int
    epoch: int
    granted: bool
    leader_id: int | None = None
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """At the leader: `follower` holds the journal below `fetch_end`, whose last entry has
    epoch `last_fetched_epoch`."""

    follower: int
    epoch: int
    fetch_end: int
    last_fetched_epoch: int
    incarnation: int = 0  # the follower's broker incarnation (0: unknown)
    learner: bool = False
    # When (the leader's clock) the leader sent its answer to the follower's previous fetch of
    # this epoch, if this request proves the follower read it (same connection, next fetch).
    confirmed_s: float | None = None


class Outcome(Enum):
    ENTRIES = "entries"
    DIVERGING = "diverging"
    NOT_LEADER = "not_leader"
    SNAPSHOT = "snapshot"  # fetch_end lies below the leader's snapshot
    TIMEOUT_NOW = "timeout_now"  # the leader handed over to the fetcher: stand at once
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TransferLeadership:
    """At a leader: hand leadership to `target` (None: the voter with the longest match) by
    `deadline_s`. Ignored by a non-leader or a cluster of one."""

    target: int | None = None
    deadline_s: float = float("inf")


@dataclass(frozen=True, slots=True)
class AbandonTransfer:
    """At a leader handing over: give up now (the target went silent) and serve on. Safe for
    the reason the deadline is: no TIMEOUT_NOW went out, or it would not lead any more."""


@dataclass(frozen=True, slots=True)
class FetchAnswered:
    """At the follower, before anything is applied: who answered and what."""

    sender: int
    outcome: Outcome
    epoch: int = 0
    leader_id: int | None = None
    diverging_epoch: int = NO_EPOCH
    diverging_end: int = 0


@dataclass(frozen=True, slots=True)
class LogChanged:
    """The journal changed under the state machine's feet: the leader appended, the follower
    applied entries or truncated. `leader_commit`: the commit index the leader sent with them;
    `matched_end` (required with it): the end of the prefix known to match the leader -- the
    fetch's `fetch_end`, which the leader checked, plus the entries appended from its answer.
    `synced_end`: the new end of the fsynced prefix (fsync policy `entry`), None: unchanged."""

    log: LogView
    leader_commit: int | None = None
    matched_end: int | None = None
    synced_end: int | None = None


# -- actions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PersistQuorum:
    epoch: int
    voted_for: int | None


@dataclass(frozen=True, slots=True)
class SendVotes:
    epoch: int
    last_epoch: int
    end: int
    to: frozenset[int]
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class AppendNoop:
    epoch: int


@dataclass(frozen=True, slots=True)
class ApplyEntries:
    """Follower: the answer is from the current leader; append its entries."""


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """Follower: the answer is the current leader's snapshot; install it (then LogChanged)."""


@dataclass(frozen=True, slots=True)
class Truncate:
    end: int


@dataclass(frozen=True, slots=True)
class CommitAdvanced:
    commit: int


@dataclass(frozen=True, slots=True)
class BecomeVoter:
    """The learner may vote from now on: persist it before anything depends on it."""


@dataclass(frozen=True, slots=True)
class StaleDivergence:
    """The leader says the journal diverges at `end`, below the commit index `commit`: nothing
    is truncated (committed entries never diverge, so the answer is stale or a rule broke),
    but the node reports it (log line and counter) rather than drop it silently."""

    end: int
    commit: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class AnswerVote:
    epoch: int
    granted: bool
    leader_id: int | None
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class AnswerFetch:
    outcome: Outcome  # ENTRIES, DIVERGING, NOT_LEADER, SNAPSHOT or TIMEOUT_NOW
    epoch: int
    leader_id: int | None
    commit: int
    fetch_end: int = 0
    diverging_epoch: int = NO_EPOCH
    diverging_end: int = 0


Event = (Tick | VoteRequest | VoteResponse | FetchRequest | FetchAnswered | LogChanged
         | TransferLeadership | AbandonTransfer)
Action = (PersistQuorum | SendVotes | AppendNoop | ApplyEntries | InstallSnapshot | Truncate
          | CommitAdvanced | StaleDivergence | RoleChanged | AnswerVote | AnswerFetch
          | BecomeVoter)


# -- the step function ----------------------------------------------------------------------


def initial_state(config: RaftConfig, epoch: int, voted_for: int | None, log: LogView,
                  commit: int, now: float, rng: random.Random,
                  synced_end: int | None = None, learner: bool = False) -> RaftState:
    """A (re)started broker: a follower that knows no leader, with what it persisted.
    `synced_end`: see RaftState (0 with fsync policy `entry`: nothing counts until synced).
    `learner`: its data directory was made in a cluster and it has not been promoted yet.
    The snapshot's entries are committed whatever `commit` says."""
    deadline = now if config.voters == {config.node_id} else now + _timeout(config, rng)
    return RaftState(epoch=epoch, voted_for=voted_for, log=log,
                     commit=max(log.start, min(commit, log.end)),
                     election_deadline_s=deadline, synced_end=synced_end,
                     rejoin=Rejoin() if learner and config.peers else None)


def lease_end_s(config: RaftConfig, state: RaftState) -> float:
    """Until when (this broker's clock) no other leader can exist and this one's commit index
    is current: -inf when it does not lead or its NOOP is not committed yet."""
    if (state.role is not Role.LEADER or state.commit <= state.epoch_start
            or state.transfer_to is not None):
        return float("-inf")
    if config.majority == 1:
        return float("inf")
    # Learners count for nothing, as in the commit and check-quorum counts.
    heard = sorted((state.heard_s.get(peer, float("-inf"))
                    for peer in config.peers - state.learners), reverse=True)
    if len(heard) < config.majority - 1:
        return float("-inf")
    return heard[config.majority - 2] + config.lease_timeout_s


def holds_lease(config: RaftConfig, state: RaftState, now: float) -> bool:
    """Whether this leader may answer reads and take writes at `now` (its monotonic clock,
    read when the answer is made, not at the last step)."""
    return now < lease_end_s(config, state)


def step(config: RaftConfig, state: RaftState, event: Event, now: float,
         rng: random.Random) -> tuple[RaftState, list[Action]]:
    actions: list[Action] = []
    before = (state.role, state.epoch, state.leader_id)
    if state.rejoin is not None:
        state = _heard(config, state, event)
    state = _HANDLERS[type(event)](config, state, event, now, rng, actions)
    if state.rejoin is not None:
        state = _maybe_promote(config, state, actions)
    if (state.role, state.epoch, state.leader_id) != before:
        actions.append(RoleChanged(state.role, state.epoch, state.leader_id))
    return state, actions


def fetch_target(state: RaftState) -> int | None:
    """Whom a non-leader fetches from: the leader it knows, or None (ask around)."""
    return state.leader_id if state.role is Role.FOLLOWER else None


def unheard_voters(config: RaftConfig, state: RaftState) -> frozenset[int]:
    """The voters a learner still has to hear from before it may vote (it asks them)."""
    if state.rejoin is None:
        return frozenset()
    return config.peers - state.rejoin.heard.keys()


def _heard(config: RaftConfig, state: RaftState, event) -> RaftState:
    """A learner notes the epoch each voter speaks for (a pre-vote asks about its own + 1)."""
    if isinstance(event, VoteRequest):
        sender, epoch = event.candidate, event.epoch - (1 if event.pre_vote else 0)
    elif isinstance(event, FetchRequest):
        sender, epoch = event.follower, event.epoch
    elif isinstance(event, FetchAnswered) and event.outcome is not Outcome.FAILED:
        sender, epoch = event.sender, event.epoch
    else:
        return state
    if sender not in config.peers:
        return state
    heard = state.rejoin.heard
    epoch = max(epoch, heard.get(sender, 0))
    return replace(state, rejoin=replace(state.rejoin, heard=_frozen({**heard, sender: epoch})))


def _maybe_promote(config, state, actions):
    """A learner becomes a voter once the rules in the module docstring allow it."""
    rejoin = state.rejoin
    if state.role is not Role.FOLLOWER or unheard_voters(config, state):
        return state
    highest = max([state.epoch, *rejoin.heard.values()])
    if highest > 0:  # the cluster has history: catch up with it first
        if (rejoin.catch_up_epoch != state.epoch or state.commit < rejoin.catch_up_commit
                or state.epoch < highest):
            return state
        if state.voted_for is None:
            # It may have voted in this epoch before it lost its state: never vote in it again.
            actions.append(PersistQuorum(state.epoch, config.node_id))
            state = replace(state, voted_for=config.node_id)
    actions.append(BecomeVoter())
    return replace(state, rejoin=None)


def _timeout(config: RaftConfig, rng: random.Random) -> float:
    return rng.uniform(config.election_timeout_min_s, config.election_timeout_max_s)


def _on_tick(config, state, _event, now, rng, actions):
    if state.role is Role.LEADER:
        if state.transfer_to is not None and now >= state.transfer_deadline_s:
            # No voter caught up in time; none was told TIMEOUT_NOW, so none can stand on
            # it: serve on.
            state = replace(state, transfer_to=None, transfer_deadline_s=float("-inf"))
        return _check_quorum(config, state, now, rng, actions)
    if state.rejoin is not None:
        if now >= state.election_deadline_s:  # never stands; only looks for a leader anew
            return replace(state, leader_id=None, election_deadline_s=now + _timeout(config, rng))
        return state
    if now >= state.election_deadline_s:
        return _start_pre_vote(config, state, now, rng, actions)
    return state


def _start_pre_vote(config, state, now, rng, actions):
    if config.majority == 1:
        return _start_election(config, state, now, rng, actions)
    state = replace(state, role=Role.FOLLOWER, leader_id=None, pre_voting=True,
                    votes=frozenset({config.node_id}),
                    election_deadline_s=now + _timeout(config, rng))
    actions.append(SendVotes(state.epoch + 1, state.log.last_epoch, state.log.end,
                             config.peers, pre_vote=True))
    return state


def _check_quorum(config, state, now, rng, actions):
    recent = 1 + sum(1 for peer in config.peers - state.learners
                     if now - state.last_fetch_s.get(peer, float("-inf"))
                     <= config.quorum_timeout_s)
    if recent >= config.majority:
        return state
    return _step_down(config, state, now, rng)


def _step_down(config, state, now, rng):
    return replace(state, role=Role.FOLLOWER, leader_id=None, votes=frozenset(),
                   pre_voting=False, transfer_to=None, transfer_deadline_s=float("-inf"),
                   election_deadline_s=now + _timeout(config, rng))


def _start_election(config, state, now, rng, actions, transfer: bool = False):
    epoch = state.epoch + 1
    state = replace(state, role=Role.CANDIDATE, epoch=epoch, voted_for=config.node_id,
                    leader_id=None, votes=frozenset({config.node_id}), pre_voting=False,
                    election_deadline_s=now + _timeout(config, rng))
    actions.append(PersistQuorum(epoch, config.node_id))
    if len(state.votes) >= config.majority:
        return _become_leader(config, state, now, actions)
    actions.append(SendVotes(epoch, state.log.last_epoch, state.log.end, config.peers,
                             transfer=transfer))
    return state


def _become_leader(config, state, now, actions):
    epoch_start = state.log.end
    log = state.log.appended(state.epoch)
    actions.append(AppendNoop(state.epoch))
    # Learner flags are learned afresh from this term's fetches: one noted in an earlier term
    # may be stale (that broker was promoted meanwhile). A learner's match stays 0 until its
    # first fetch, which flags it before anything counts it.
    state = replace(state, role=Role.LEADER, leader_id=config.node_id, log=log,
                    votes=frozenset(), pre_voting=False, epoch_start=epoch_start,
                    match=_frozen({peer: 0 for peer in config.peers}),
                    last_fetch_s=_frozen({peer: now for peer in config.peers}),
                    heard_s=_frozen({}), learners=frozenset(), caught_up_s=_frozen({}),
                    end_at_fetch=_frozen({}))
    return _advance_leader_commit(config, state, actions)


def _adopt_epoch(state: RaftState, epoch: int, leader_id: int | None, now: float,
                 config: RaftConfig, rng: random.Random, actions: list) -> RaftState:
    """Someone speaks for a newer epoch: follow it (voted_for resets with the epoch). A hint
    naming this very broker as that epoch's leader is stale -- this broker is not leading it:
    it led it before a restart with a wiped directory (a new incarnation that remembers no
    epoch), and a peer still names it -- so the leader stays unknown and the broker asks
    around, never fetching from itself."""
    assert epoch > state.epoch
    actions.append(PersistQuorum(epoch, None))
    if leader_id == config.node_id:
        leader_id = None
    return replace(state, role=Role.FOLLOWER, epoch=epoch, voted_for=None, leader_id=leader_id,
                   votes=frozenset(), pre_voting=False, transfer_to=None,
                   transfer_deadline_s=float("-inf"),
                   election_deadline_s=now + _timeout(config, rng))


def _hears_from_leader(config, state, now) -> bool:
    if state.role is Role.LEADER:
        return True
    return (state.leader_id is not None
            and now - state.last_leader_contact_s < config.election_timeout_min_s)


def _on_vote_request(config, state, event: VoteRequest, now, rng, actions):
    if event.pre_vote:
        return _on_pre_vote_request(config, state, event, now, actions)
    # A transfer's candidate stands because the leader handed over and gave up its lease, so
    # the refusal that protects the lease does not apply to it.
    if event.epoch < state.epoch or (event.epoch > state.epoch and not event.transfer
                                     and _hears_from_leader(config, state, now)):
        actions.append(AnswerVote(state.epoch, False, state.leader_id))
        return state
    if event.epoch > state.epoch:
        state = _adopt_epoch(state, event.epoch, None, now, config, rng, actions)
    complete = (event.last_epoch, event.end) >= (state.log.last_epoch, state.log.end)
    free = state.voted_for in (None, event.candidate)
    if not (complete and free and state.role is Role.FOLLOWER and state.rejoin is None):
        actions.append(AnswerVote(state.epoch, False, state.leader_id))
        return state
    if state.voted_for is None:
        actions.append(PersistQuorum(state.epoch, event.candidate))
    state = replace(state, voted_for=event.candidate,
                    election_deadline_s=now + _timeout(config, rng))
    actions.append(AnswerVote(state.epoch, True, state.leader_id))
    return state


def _on_pre_vote_request(config, state, event: VoteRequest, now, actions):
    complete = (event.last_epoch, event.end) >= (state.log.last_epoch, state.log.end)
    granted = (event.epoch > state.epoch and complete and state.rejoin is None
               and not _hears_from_leader(config, state, now))
    actions.append(AnswerVote(event.epoch if granted else state.epoch, granted,
                              state.leader_id, pre_vote=True))
    return state


def _on_vote_response(config, state, event: VoteResponse, now, rng, actions):
    if event.pre_vote:
        return _on_pre_vote_response(config, state, event, now, rng, actions)
    if event.epoch > state.epoch:
        return _adopt_epoch(state, event.epoch, event.leader_id, now, config, rng, actions)
    if state.role is not Role.CANDIDATE or event.epoch != state.epoch or not event.granted:
        return state
    state = replace(state, votes=state.votes | {event.voter})
    if len(state.votes) >= config.majority:
        return _become_leader(config, state, now, actions)
    return state


def _on_pre_vote_response(config, state, event: VoteResponse, now, rng, actions):
    if not event.granted:
        if event.epoch > state.epoch:
            return _adopt_epoch(state, event.epoch, event.leader_id, now, config, rng, actions)
        return state
    if not state.pre_voting or event.epoch != state.epoch + 1:
        return state
    state = replace(state, votes=state.votes | {event.voter})
    if len(state.votes) >= config.majority:
        return _start_election(config, state, now, rng, actions)
    return state


def _on_fetch_request(config, state, event: FetchRequest, now, rng, actions):
    # A follower of a live leader keeps its epoch (and so its vote refusal, which the leader's
    # lease counts on); the asker, one epoch ahead, tries the next broker and reaches the
    # leader, whom its epoch deposes.
    if event.epoch > state.epoch and not (state.role is Role.FOLLOWER
                                          and _hears_from_leader(config, state, now)):
        state = _adopt_epoch(state, event.epoch, None, now, config, rng, actions)
    if state.role is not Role.LEADER or event.epoch < state.epoch:
        actions.append(AnswerFetch(Outcome.NOT_LEADER, state.epoch, state.leader_id,
                                   state.commit))
        return state
    previous_fetch = (state.last_fetch_s.get(event.follower),
                      state.end_at_fetch.get(event.follower))
    state = replace(state, last_fetch_s=_frozen({**state.last_fetch_s, event.follower: now}),
                    end_at_fetch=_frozen({**state.end_at_fetch, event.follower: state.log.end}))
    state = _note_identity(state, event)
    if event.confirmed_s is not None and event.confirmed_s > state.heard_s.get(
            event.follower, float("-inf")):
        state = replace(state, heard_s=_frozen({**state.heard_s,
                                                event.follower: event.confirmed_s}))
    if event.fetch_end > 0:
        found, end = state.log.end_of_epoch(event.last_fetched_epoch)
        if found != event.last_fetched_epoch or end < event.fetch_end:
            actions.append(AnswerFetch(Outcome.DIVERGING, state.epoch, config.node_id,
                                       state.commit, event.fetch_end, found, end))
            return state
    # Below fetch_end the follower's journal equals ours (Raft's log matching); it may be
    # lower than before (a wiped disk), so match follows it down rather than up only.
    state = replace(state, match=_frozen({**state.match, event.follower: event.fetch_end}))
    state = _note_follower_caught_up(state, event.follower, event.fetch_end, previous_fetch,
                                     now)
    state = _advance_leader_commit(config, state, actions)
    if (state.transfer_to == event.follower and event.fetch_end >= state.log.end
            and event.follower not in state.learners):
        # The chosen voter holds the whole journal: it stands now, and this leader never
        # leads this epoch again (its TIMEOUT_NOW may be lost: then an election timeout).
        actions.append(AnswerFetch(Outcome.TIMEOUT_NOW, state.epoch, config.node_id,
                                   state.commit, event.fetch_end))
        return _step_down(config, state, now, rng)
    # Entries below our snapshot are gone: the follower takes the snapshot instead.
    outcome = Outcome.SNAPSHOT if event.fetch_end < state.log.start else Outcome.ENTRIES
    actions.append(AnswerFetch(outcome, state.epoch, config.node_id, state.commit,
                               event.fetch_end))
    return state


def _note_follower_caught_up(state: RaftState, follower: int, fetch_end: int,
                             previous_fetch: tuple[float | None, int | None],
                             now: float) -> RaftState:
    """Kafka's lastCaughtUpTime. A fetch from this leader's end: the follower holds the whole
    journal now. A fetch from at least the end this leader had at the follower's previous fetch
    (`previous_fetch`: its time and that end): it held, once that fetch's answer arrived,
    everything this leader held when that fetch came: caught up as of then, one fetch round
    trip behind (Kafka's rule). A follower that keeps fetching from further back (stuck, or
    outpaced by the writers) earns nothing."""
    previous_s, previous_end = previous_fetch
    if fetch_end >= state.log.end:
        caught_up = now
    elif previous_s is not None and previous_end is not None and fetch_end >= previous_end:
        caught_up = previous_s
    else:
        return state
    if caught_up <= state.caught_up_s.get(follower, float("-inf")):
        return state
    return replace(state, caught_up_s=_frozen({**state.caught_up_s, follower: caught_up}))


def _note_identity(state: RaftState, event: FetchRequest) -> RaftState:
    """A follower with another broker incarnation than before lost its journal (or is another
    directory): what the leader knew it held is void, so its match starts again from 0."""
    follower = event.follower
    known = state.incarnations.get(follower)
    if event.incarnation and known != event.incarnation:
        if known is not None:
            # Nor did it catch up: what it held then is gone.
            state = replace(state, match=_frozen({**state.match, follower: 0}),
                            caught_up_s=_frozen({k: v for k, v in state.caught_up_s.items()
                                                 if k != follower}))
        state = replace(state, incarnations=_frozen({**state.incarnations,
                                                     follower: event.incarnation}))
    learners = state.learners | {follower} if event.learner else state.learners - {follower}
    return replace(state, learners=learners) if learners != state.learners else state


def _held_end(state: RaftState) -> int:
    """The end of the journal prefix this broker counts as holding: all of it, or (fsync
    policy `entry`) only what it fsynced -- a power cut would take the rest."""
    if state.synced_end is None:
        return state.log.end
    return min(state.log.end, state.synced_end)


def _advance_leader_commit(config, state, actions):
    ends = sorted([_held_end(state), *(state.match.get(p, 0) for p in config.peers
                                       if p not in state.learners)], reverse=True)
    if len(ends) < config.majority:
        return state  # too many learners: no majority of voters holds anything yet
    candidate = ends[config.majority - 1]
    if candidate > state.commit and candidate > state.epoch_start:
        actions.append(CommitAdvanced(candidate))
        return replace(state, commit=candidate)
    return state


def _on_fetch_answered(config, state, event: FetchAnswered, now, rng, actions):
    if event.outcome is Outcome.FAILED or event.epoch < state.epoch:
        return state
    if event.outcome is Outcome.TIMEOUT_NOW:
        return _on_timeout_now(config, state, event, now, rng, actions)
    if event.outcome is Outcome.NOT_LEADER:
        return _on_leader_hint(config, state, event, now, rng, actions)
    if event.epoch > state.epoch:
        state = _adopt_epoch(state, event.epoch, event.sender, now, config, rng, actions)
    if state.role is Role.LEADER:
        return state  # cannot happen: one leader per epoch; never apply another's entries
    state = replace(state, role=Role.FOLLOWER, leader_id=event.sender, votes=frozenset(),
                    pre_voting=False, last_leader_contact_s=now,
                    election_deadline_s=now + _timeout(config, rng))
    if event.outcome is Outcome.ENTRIES:
        actions.append(ApplyEntries())
    elif event.outcome is Outcome.SNAPSHOT:
        actions.append(InstallSnapshot())
    else:
        _own, own_end = state.log.end_of_epoch(event.diverging_epoch)
        end = min(event.diverging_end, own_end)
        if end >= state.commit:
            actions.append(Truncate(end))
        else:  # a stale answer (committed entries never diverge), or a broken rule: say so
            actions.append(StaleDivergence(end, state.commit, event.sender))
    return state


def _on_timeout_now(config, state, event: FetchAnswered, now, rng, actions):
    """The leader of this very epoch handed over to this broker: stand at once, without a
    pre-vote (the leader stepped down; waiting out an election timeout is what a transfer
    avoids). A learner cannot stand, and an answer of an older epoch is stale."""
    if (event.epoch != state.epoch or state.role is Role.LEADER or state.rejoin is not None
            or state.leader_id not in (None, event.sender)):
        return state
    return _start_election(config, state, now, rng, actions, transfer=True)


def _on_transfer(config, state, event: TransferLeadership, now, rng, actions):
    """Start handing over (module docstring): pick the voter, stop holding the lease."""
    voters = config.peers - state.learners
    if state.role is not Role.LEADER or not voters:
        return state
    target = event.target
    if target is None:
        target = max(sorted(voters), key=lambda peer: state.match.get(peer, 0))
    elif target not in voters:
        return state
    return replace(state, transfer_to=target, transfer_deadline_s=event.deadline_s)


def _on_abandon_transfer(config, state, event: AbandonTransfer, now, rng, actions):
    if state.transfer_to is None:
        return state
    return replace(state, transfer_to=None, transfer_deadline_s=float("-inf"))


def _on_leader_hint(config, state, event: FetchAnswered, now, rng, actions):
    leader = event.leader_id
    if event.epoch > state.epoch:
        return _adopt_epoch(state, event.epoch, leader, now, config, rng, actions)
    if (leader is not None and leader != config.node_id and state.leader_id is None
            and state.role is not Role.LEADER):
        # Someone won this very epoch (we were candidate or just restarted): follow it.
        return replace(state, role=Role.FOLLOWER, leader_id=leader, votes=frozenset(),
                       pre_voting=False)
    return state


def _on_log_changed(config, state, event: LogChanged, now, rng, actions):
    state = replace(state, log=event.log)
    if event.synced_end is not None:
        state = replace(state, synced_end=event.synced_end)
    if state.role is Role.LEADER:
        return _advance_leader_commit(config, state, actions)
    if event.leader_commit is not None:
        assert event.matched_end is not None, "a leader's commit comes with the matched end"
        if state.rejoin is not None:
            state = _note_catch_up(state, event)
        matched = min(event.matched_end, event.log.end)
        commit = max(state.commit, min(event.leader_commit, matched))
        if commit > state.commit:
            actions.append(CommitAdvanced(commit))
            state = replace(state, commit=commit)
    return state


def _note_catch_up(state: RaftState, event: LogChanged) -> RaftState:
    """A learner's catch-up target: the leader's commit index, but only once it covers an entry
    of the leader's own epoch. Until its own entry commits, a leader's commit index may lag
    what was committed before (a restarted broker forgets its commit index; Raft's Figure 8):
    a learner caught up to such an index could lack an entry its lost copy helped commit, and
    vote for a candidate without it (soak seed 10269). Taken afresh in every epoch."""
    rejoin = state.rejoin
    if rejoin.catch_up_epoch == state.epoch:
        return state
    first = next((start for epoch, start in event.log.epochs if epoch == state.epoch), None)
    if first is None or event.leader_commit <= first or event.matched_end <= first:
        return state
    return replace(state, rejoin=replace(rejoin, catch_up_commit=event.leader_commit,
                                         catch_up_epoch=state.epoch))


_HANDLERS = {
    Tick: _on_tick,
    VoteRequest: _on_vote_request,
    VoteResponse: _on_vote_response,
    FetchRequest: _on_fetch_request,
    FetchAnswered: _on_fetch_answered,
    LogChanged: _on_log_changed,
    TransferLeadership: _on_transfer,
    AbandonTransfer: _on_abandon_transfer,
}
