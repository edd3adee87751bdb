"""A deterministic cluster of `raft.py` state machines on a hostile simulated network.

The simulator plays the edge that `node.py` plays in the broker, with a journal that is a list
of `(epoch, payload)` entries:

- every node has a persisted part (the journal and `(epoch, voted_for)`, both durable at once
  in this model) and a volatile part (its `RaftState`); a crash loses the volatile part (and
  whatever actions of the step in progress were not carried out yet), a restart rebuilds it
  with `initial_state` and a commit index of 0 or anything up to the one it had;
- actions are carried out in order: `PersistQuorum` writes the quorum state, `AppendNoop`
  appends `(epoch, "noop")`, `SendVotes`/`AnswerVote`/`AnswerFetch` put packets on the
  network, `ApplyEntries` copies the entries the leader attached to its answer (a snapshot of
  its journal at answer time, from `fetch_end`) and `Truncate` cuts the journal; both are
  followed by `LogChanged`, as in `node.py`;
- followers keep one fetch in flight (the broker's fetch is a blocking request/response; a late
  answer to a request it gave up on is never read): to `fetch_target(state)`, or round-robin;
- clients append payloads at every node whose state machine says LEADER;
- the network drops, duplicates, delays (so reorders) packets and partitions nodes;
- a client append may land in the journal DURING the node's next step (another thread's
  produce, after the node's last look at the journal) and be announced (`LogChanged`) only
  some rounds later, as a produce thread paused before `leader_appended()`; that step may
  depose the leader. As node.py, every other step first shows the state
  machine the whole journal, and fetches are built from the state machine's view;
- every client append waits for its acknowledgement, checked now and then (a held answer, as
  a pipelined produce in connection.py): acknowledged only once the commit index passes its
  index AND the entry there is of its epoch, NOT_LEADER once the node stopped leading that
  epoch. The checker: an acknowledged append is the entry committed at its index;
- some appends create or delete topics `t0`/`t1` (a topic op rides in the payload: `+t0`,
  `-t0`): as node.py, a CREATE makes its incarnation (named by its (epoch, index)) on append,
  replacing any older one on disk; a committed DELETE removes only the incarnation it names;
  a truncated CREATE's topic goes; the applied index is persisted after each delete (and now
  and then); a restart reconciles the disk with the journal and applies the committed prefix
  again with effects only from the persisted applied index;
- a crashed node may restart with its data directory wiped (`Faults.wipe`): journal, epoch,
  vote, topics and applied index gone, a new broker incarnation on its fetches, and -- as
  node.py -- a learner until the state machine promotes it. At most one node is without its
  state at a time (wiped, not yet promoted): losing a majority of directories loses committed
  entries whatever the protocol. The checks below are unchanged; the vote checker remembers
  votes across the wipe, so a wiped node that votes again in an epoch it forgot is caught.
- nodes compact their journal now and then (`Faults.compact`): the applied prefix becomes the
  snapshot (`start`, durable); a leader answers a fetch below its start SNAPSHOT (the state
  machine's rule) with its prefix, and the follower installs it (its whole journal replaced, its
  topics the prefix's, as node.py). The simulator keeps the compacted entries as ghost state for
  the checkers, and fails if the node's side ever reads one: an ENTRIES answer or a truncation
  below the start.

Leadership transfer (`Faults.transfer`): a leader is told now and then to hand over
to a random voter or its best caught-up one, by a random deadline; it answers that voter's
caught-up fetch TIMEOUT_NOW (dropped, doubled and delayed like any answer) and the voter stands
with `transfer` vote requests. Every check below holds through it, the lease ones included.

After every single `step` the invariants are checked (`SafetyViolation` on the first breach),
and a commit as soon as its `CommitAdvanced` is carried out (a crash later in that step keeps
its effects: the applied index a restart takes as its commit index):
election safety, one vote per voter and epoch, leader completeness, state machine safety, log
matching, no truncation below the commit index (nor of any committed entry a node holds),
persisted quorum state equal to the state machine's, the state machine's view of the
journal equal to the journal (but for appends it has not heard of yet), an acknowledgement
naming the committed entry, and the topics on disk: the newest incarnation of every topic not
deleted after it is on disk, an incarnation whose delete was applied is not, and nothing else.

Leader lease: a leader's answer carries the time it was made; a
follower's next fetch to the same broker confirms it (`FetchRequest.confirmed_s`) only if the
follower read that answer and gave up on no request since (node.py: a new connection after
any failed fetch). After every round: at most one node holds a lease, and a lease holder's
commit index covers every committed entry (a read there is never stale).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from services.broker.replication.raft import (
    AnswerFetch,
    AnswerVote,
    AppendNoop,
    ApplyEntries,
    BecomeVoter,
    CommitAdvanced,
    FetchAnswered,
    FetchRequest,
    InstallSnapshot,
    LogChanged,
    LogView,
    Outcome,
    PersistQuorum,
    RaftConfig,
    RaftState,
    Role,
    RoleChanged,
    SendVotes,
    Tick,
    TransferLeadership,
    Truncate,
    VoteRequest,
    VoteResponse,
    fetch_target,
    holds_lease,
    initial_state,
    step,
    unheard_voters,
)

Entry = tuple[int, str]  # (epoch, payload id)


class SafetyViolation(AssertionError):
    """An invariant of Raft broke in the simulation."""


class LivenessFailure(AssertionError):
    """A healed, crash-free cluster did not elect a leader or commit a fresh entry in time."""


@dataclass(frozen=True)
class Faults:
    """Probabilities are per packet (network) or per node and round (crashes)."""

    drop: float = 0.05
    duplicate: float = 0.03
    delay_max_s: float = 0.15
    long_delay: float = 0.02  # this share of packets waits up to long_delay_max_s
    long_delay_max_s: float = 3.0
    crash: float = 0.002
    leader_crash: float = 0.0  # per round: crash whoever leads (uncommitted tails diverge)
    crash_mid_step: float = 0.001  # per step: die between two actions of the step
    down_max_s: float = 5.0
    partition: float = 0.004  # per round: a new partition (or a heal)
    partition_max_s: float = 8.0
    client_append: float = 0.3  # per round and leader
    tick_skip: float = 0.2  # per node and round: this node's loop is late
    dt_max_s: float = 0.12  # a round advances the clock by up to this much
    unannounced: float = 0.1  # per client append: the state machine hears of it late
    ack_hold: float = 0.2  # per client append: its answer is held up to ack_hold_max_s
    ack_hold_max_s: float = 3.0
    announce: float = 0.1  # per round and node: a late-announced append is announced
    topic_ops: float = 0.1  # per client append: a topic create or delete instead of data
    wipe: float = 0.0  # per crash: the node restarts with an empty data directory
    # Per round and leader: SIGSTOP it for up to leader_pause_max_s (no tick, no step; what is
    # sent to it waits in its socket; its clock runs on). 0 draws nothing from the rng.
    leader_pause: float = 0.0
    leader_pause_max_s: float = 4.0
    compact: float = 0.0  # per node and round: fold the applied prefix into the snapshot
    # Per round and leader: tell it to hand leadership over (TransferLeadership: a random
    # voter or the best caught-up one) within up to transfer_deadline_max_s. 0 draws nothing.
    transfer: float = 0.0
    transfer_deadline_max_s: float = 3.0

    def calm(self) -> Faults:
        return Faults(drop=0.0, duplicate=0.0, delay_max_s=0.05, long_delay=0.0, crash=0.0,
                      leader_crash=0.0, crash_mid_step=0.0, partition=0.0, client_append=0.0,
                      tick_skip=self.tick_skip, dt_max_s=self.dt_max_s, unannounced=0.0,
                      compact=self.compact, transfer=self.transfer)


# Leaders die often with a busy client: uncommitted tails diverge, Figure 8 lurks.
CRASHY = Faults(drop=0.1, duplicate=0.05, delay_max_s=0.2, crash=0.01, leader_crash=0.01,
                crash_mid_step=0.004, down_max_s=3.0, partition=0.01, partition_max_s=4.0,
                client_append=0.7)
# Messages are lost, late and doubled; partitions come and go.
LOSSY = Faults(drop=0.3, duplicate=0.1, delay_max_s=0.4, long_delay=0.08, crash=0.004,
               partition=0.02, partition_max_s=6.0, client_append=0.5)
PROFILES = {"default": Faults(), "crashy": CRASHY, "lossy": LOSSY}

NO_FAULTS = Faults(drop=0.0, duplicate=0.0, delay_max_s=0.02, long_delay=0.0, crash=0.0,
                   crash_mid_step=0.0, partition=0.0, client_append=0.0, tick_skip=0.0,
                   dt_max_s=0.05, unannounced=0.0)
TOPICS = ("t0", "t1")
ACK_TIMEOUT_S = 10.0
TopicId = tuple[int, int]  # (epoch, index) of the CREATE that made the incarnation


def topic_op(payload: str) -> tuple[str | None, str]:
    """("create" | "delete" | None, topic) of an entry's payload."""
    for mark, kind in (("+", "create"), ("-", "delete")):
        if mark in payload:
            return kind, payload.split(mark, 1)[1]
    return None, ""


def reconciled_disk(node: SimNode, commit: int) -> dict[str, TopicId]:
    """reconcile.py's replay: every CREATE makes its incarnation, a committed DELETE removes
    the one it names."""
    disk: dict[str, TopicId] = {}
    for topic, events in node.topic_events.items():
        for index, kind, epoch in events:
            if kind == "create":
                disk[topic] = (epoch, index)
            elif index < commit and disk.get(topic) == node.topic_id_before(index, topic):
                disk.pop(topic, None)
    return disk


@dataclass
class Waiter:
    """A client append waiting for its acknowledgement at the node that took it."""

    node_id: int
    life: int  # the node's restart count when it took the append
    index: int
    epoch: int
    payload: str
    since_s: float
    held_until_s: float  # not looked at before (a held answer, a paused thread)


@dataclass(frozen=True)
class FetchMessage:
    request: FetchRequest
    request_id: int


@dataclass(frozen=True)
class FetchAnswerMessage:
    answer: AnswerFetch
    request_id: int
    entries: tuple[Entry, ...] = ()  # ENTRIES: the leader's journal from fetch_end
    answered_s: float = 0.0  # when the leader made the answer (its lease counts from it)
    snapshot: tuple[Entry, ...] = ()  # SNAPSHOT: the prefix the leader's snapshot stands for


@dataclass(order=True)
class Packet:
    deliver_at: float
    seq: int
    to: int = field(compare=False)
    sender: int = field(compare=False)
    body: object = field(compare=False)


@dataclass
class Stats:
    rounds: int = 0
    steps: int = 0
    elections: int = 0  # elections won (one leader per epoch, checked)
    pre_votes: int = 0
    candidacies: int = 0
    commits: int = 0  # CommitAdvanced actions
    committed_entries: int = 0  # length of the globally committed prefix
    client_appends: int = 0
    crashes: int = 0
    crashes_mid_step: int = 0
    restarts: int = 0
    partitions: int = 0
    sent: int = 0
    drops: int = 0
    duplicates: int = 0
    stale_answers: int = 0
    truncations: int = 0
    entries_applied: int = 0
    step_downs: int = 0  # a leader became a follower
    lost_after_healing: int = 0  # appends cut by a leader change in a healed cluster
    acks: int = 0  # acknowledgements given (each checked against the committed entry)
    not_leader_answers: int = 0  # waiters answered NOT_LEADER (the leader moved on)
    unannounced_appends: int = 0  # appends the state machine heard of late
    stale_tails: int = 0  # fetch answers not applied: the journal held an unannounced tail
    topic_creates: int = 0
    topic_deletes: int = 0
    deletes_of_older_incarnations: int = 0  # committed deletes that found a newer topic
    wipes: int = 0  # restarts with an empty data directory
    promotions: int = 0  # learners that became voters
    lease_rounds: int = 0  # rounds in which some leader held its lease (checked)
    leader_pauses: int = 0
    compactions: int = 0
    snapshot_answers: int = 0
    snapshot_installs: int = 0  # a follower behind a leader's snapshot caught up through it
    transfers: int = 0  # TransferLeadership told to a leader
    timeout_nows: int = 0  # TIMEOUT_NOW answers sent (the leader stepped down)
    transfer_candidacies: int = 0  # elections started on a TIMEOUT_NOW
    transfer_wins: int = 0  # of them, won by the target in that very epoch

    def add(self, other: Stats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class SimNode:
    config: RaftConfig
    rng: random.Random
    journal: list[Entry] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start), derived
    hashes: list[int] = field(default_factory=list)  # hash of the journal up to each entry
    epoch: int = 0  # persisted quorum state
    voted_for: int | None = None
    state: RaftState | None = None  # None while down
    seen_commit: int = 0  # the commit index the checks have seen for this incarnation
    outstanding: tuple[int, float, FetchRequest] | None = None  # (request id, sent at, req)
    # The last answer read on the "connection" to a broker: (broker, epoch, answered at);
    # None after a request given up on (node.py drops the connection).
    read_answer: tuple[int, int, float] | None = None
    paused_until: float = 0.0  # SIGSTOPped until then (Faults.leader_pause)
    next_peer: int = 0
    down_until: float = 0.0
    unannounced: int = 0  # journal entries at the end that the state machine has not seen
    landing: tuple[Entry, Waiter] | None = None  # a client append landing during the next step
    life: int = 0  # restarts so far
    disk: dict[str, TopicId] = field(default_factory=dict)  # topics on disk (durable)
    # The journal's topic ops, per topic in index order: (index, "create"/"delete", epoch).
    topic_events: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)
    applied: int = 0  # entries below it applied (volatile)
    applied_persisted: int = 0  # durable; effects below it are done
    effects_from: int = 0  # applied_persisted as of the last start
    incarnation: int = 1  # the broker incarnation: a new one with every wiped directory
    learner: bool = False  # persisted (identity.py's `voter`, negated)
    wipe_pending: bool = False  # crashed, and restarts with an empty directory
    start: int = 0  # durable: entries below it are compacted (ghosts for the checkers only)
    transfer_epoch: int | None = None  # the epoch it last stood for on a TIMEOUT_NOW

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def up(self) -> bool:
        return self.state is not None

    def view(self) -> LogView:
        return LogView(len(self.journal), tuple(self.epochs), self.start)

    def topic_id_before(self, index: int, topic: str) -> TopicId | None:
        """The incarnation an entry at `index` names: the latest CREATE of `topic` before."""
        for at, kind, epoch in reversed(self.topic_events.get(topic, ())):
            if at < index and kind == "create":
                return epoch, at
        return None


class Simulation:
    # The acknowledgement rule (a mutant may use "index": commit past the index is enough).
    ack_rule = "entry"
    # How a restart applies committed deletes ("replay": from 0, by name -- the old rule).
    apply_rule = "once"
    # How a follower takes a CREATE ("keep": the old rule -- the commit only after the whole
    # answer, and a topic of that name already on disk is kept).
    create_rule = "replace"
    # Whether a step first shows the state machine the whole journal ("stale": the old rule).
    view_rule = "refresh"
    # What a node with a wiped directory restarts as ("voter": the old rule).
    wipe_rule = "learner"

    def __init__(self, ids=(1, 2, 3), seed: int = 0, faults: Faults | None = None,
                 election_timeout_min_s: float = 1.0, election_timeout_max_s: float = 2.0,
                 quorum_timeout_s: float = 2.0, request_timeout_s: float = 0.5,
                 fetch_entries_max: int = 16, trace: bool = False):
        self.ids = tuple(ids)
        self.rng = random.Random(seed)
        self.faults = faults if faults is not None else Faults()
        self.request_timeout_s = request_timeout_s
        self.fetch_entries_max = fetch_entries_max
        self.now = 0.0
        self.stats = Stats()
        self.trace: list[str] | None = [] if trace else None
        self.nodes: dict[int, SimNode] = {}
        for node_id in self.ids:
            config = RaftConfig(node_id, frozenset(self.ids), election_timeout_min_s,
                                election_timeout_max_s, quorum_timeout_s)
            node = SimNode(config, random.Random(self.rng.getrandbits(64)))
            node.state = initial_state(config, 0, None, node.view(), 0, self.now, node.rng)
            self.nodes[node_id] = node
        self.network: list[Packet] = []  # a heap by delivery time
        self._seq = 0
        self._request_ids = 0
        self._payloads = 0
        self.cut: set[frozenset[int]] = set()  # unordered pairs that cannot talk
        self.cut_until = 0.0
        # -- the history the invariants are checked against --
        self.leader_of_epoch: dict[int, int] = {}
        self.votes: dict[tuple[int, int], int] = {}  # (epoch, voter) -> candidate
        self.committed: list[Entry] = []  # the globally committed prefix
        self.commit_epoch: list[int] = []  # the epoch it was first seen committed in
        self.canon: dict[tuple[int, int], int] = {}  # (index, epoch) -> prefix hash
        self.leaders_checked: set[tuple[int, int]] = set()  # (node, epoch)
        self.waiters: list[Waiter] = []
        # A hand-stepped test's crash: the next step dies after this many of its actions
        # (drawn from no rng, so seeded runs are unchanged). None: Faults.crash_mid_step.
        self.crash_next_step_after: int | None = None

    # -- the driver --------------------------------------------------------------------------

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.round()

    def run_for(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.round()

    def round(self, dt_s: float | None = None) -> None:
        """One slice of time: faults, the clock, ticks, deliveries, fetches, clients. `dt_s`:
        how far the clock moves (None: a random step; several simulations that play the
        replication groups of one cluster move together, test_topic_mirror_property.py)."""
        faults = self.faults
        rng = self.rng
        self.stats.rounds += 1
        self._maybe_fault()
        self.now += rng.uniform(0.0, faults.dt_max_s) if dt_s is None else dt_s
        for node in self._running_nodes():
            if node.up and rng.random() >= faults.tick_skip:
                self._step(node, Tick())
        while self.network and self.network[0].deliver_at <= self.now:
            self._deliver(heapq.heappop(self.network))
        for node in self._running_nodes():
            if node.up and node.unannounced and rng.random() < faults.announce:
                # The paused produce thread goes on: leader_appended(), whatever the role now.
                self._step(node, LogChanged(node.view()))
            if node.up and rng.random() < 0.05:
                node.applied_persisted = max(node.applied_persisted, node.applied)
            # No draw without compaction: the seeds of the other profiles replay as before.
            if (faults.compact > 0 and node.up and node.applied > node.start
                    and rng.random() < faults.compact):
                self.compact(node)
        for node in self._running_nodes():
            if node.up and node.state.role is not Role.LEADER:
                self._maybe_fetch(node)
        for node in self._running_nodes():
            if node.up and node.state.role is Role.LEADER and rng.random() < faults.client_append:
                self.client_append(node.node_id)
        self._settle_acks()
        self._check_leases()

    def _check_leases(self) -> None:
        # A paused node counts too: thawed, it answers before its loop ticks (node.py reads
        # the clock when it answers).
        holders = [node for node in self._up_nodes()
                   if holds_lease(node.config, node.state, self.now)]
        if len(holders) > 1:
            raise SafetyViolation(f"two leases at {self.now:.3f}: "
                                  f"{[(n.node_id, n.state.epoch) for n in holders]}")
        if holders:
            self.stats.lease_rounds += 1
            if holders[0].state.commit < len(self.committed):
                raise SafetyViolation(
                    f"stale read: lease holder {holders[0].node_id} of epoch "
                    f"{holders[0].state.epoch} commits {holders[0].state.commit}, "
                    f"{len(self.committed)} entries are committed")

    def settle(self) -> None:
        """Heal everything, restart every node; from now on no faults and no clients."""
        self.faults = self.faults.calm()
        self.cut.clear()
        for node in self.nodes.values():
            node.paused_until = 0.0
        for node in self.nodes.values():
            if not node.up:
                self.restart(node.node_id)

    def check_liveness(self, timeout_s: float | None = None) -> float:
        """After `settle`: a leader emerges, and an entry appended at it is committed at every
        node. An append can still be lost once: a node that passed a pre-vote but then lost
        its vote is left with a higher epoch, and its fetches depose the leader when it
        rejoins (the price of letting it rejoin at all); then a fresh entry is tried at the
        next leader. The default time limit allows for followers that fetch a long backlog a
        few entries at a time. Returns the simulated seconds it took."""
        backlog = max(len(node.journal) for node in self.nodes.values())
        if timeout_s is None:
            timeout_s = 40.0 + 0.4 * backlog / self.fetch_entries_max
        start = self.now
        deadline = start + timeout_s
        while self.now <= deadline:
            leader = self.current_leader()
            if leader is None:
                self.round()
                continue
            payload = self.client_append(leader)
            index = len(self.nodes[leader].journal) - 1
            entry = self.nodes[leader].journal[index]
            while self.now <= deadline:
                if all(node.state.commit > index for node in self.nodes.values()):
                    if self.committed[index] != entry:
                        raise LivenessFailure(f"{payload} is not what was committed")
                    return self.now - start
                journal = self.nodes[leader].journal
                if len(journal) <= index or journal[index] != entry:
                    self.stats.lost_after_healing += 1
                    break  # a new leader cut it: try again
                self.round()
        raise LivenessFailure(
            f"no entry committed everywhere {timeout_s:.0f} s after healing (leaders "
            f"{self.leaders()}, commits "
            f"{ {n: node.state.commit for n, node in self.nodes.items()} })")

    def _up_nodes(self) -> list[SimNode]:
        return [node for node in self.nodes.values() if node.up]

    def _running_nodes(self) -> list[SimNode]:
        return [node for node in self._up_nodes() if self.now >= node.paused_until]

    def _maybe_fault(self) -> None:
        faults = self.faults
        rng = self.rng
        for node in self.nodes.values():
            if node.up and (rng.random() < faults.crash or (
                    node.state.role is Role.LEADER and rng.random() < faults.leader_crash)):
                self.crash(node.node_id)
            elif not node.up and self.now >= node.down_until:
                self.restart(node.node_id)
        if faults.leader_pause:
            for node in self._running_nodes():
                if node.state.role is Role.LEADER and rng.random() < faults.leader_pause:
                    node.paused_until = self.now + rng.uniform(0.0, faults.leader_pause_max_s)
                    self.stats.leader_pauses += 1
                    self._log(f"{node.node_id} paused until {node.paused_until:.3f}")
        if faults.transfer:
            for node in self._running_nodes():
                if (node.state.role is Role.LEADER and node.state.transfer_to is None
                        and rng.random() < faults.transfer):
                    self.transfer(node.node_id)
        if self.cut and self.now >= self.cut_until:
            self.cut.clear()
        if rng.random() < faults.partition:
            self.partition()

    def partition(self) -> None:
        """Cut the cluster: one node off, two halves, or a single link (or heal)."""
        rng = self.rng
        ids = list(self.ids)
        if len(ids) < 2:
            return
        self.stats.partitions += 1
        kind = rng.randrange(4)
        self.cut.clear()
        if kind == 0:
            alone = rng.choice(ids)
            self.cut = {frozenset((alone, other)) for other in ids if other != alone}
        elif kind == 1:
            rng.shuffle(ids)
            half = rng.randrange(1, len(ids))
            self.cut = {frozenset((a, b)) for a in ids[:half] for b in ids[half:]}
        elif kind == 2:
            self.cut = {frozenset(rng.sample(ids, 2))}
        self.cut_until = self.now + rng.uniform(0.5, self.faults.partition_max_s)

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.up:
            return
        self.stats.crashes += 1
        self._log(f"{node_id} crashes")
        node.state = None
        node.outstanding = None
        node.read_answer = None
        node.paused_until = 0.0
        node.unannounced = 0  # the journal keeps those entries; a restart sees them all
        node.landing = None
        node.down_until = self.now + self.rng.uniform(0.0, self.faults.down_max_s)
        stateless = any(other.learner or other.wipe_pending for other in self.nodes.values())
        if self.faults.wipe and not stateless and self.rng.random() < self.faults.wipe:
            node.wipe_pending = True

    def _wipe(self, node: SimNode) -> None:
        """Everything the data directory held is gone; a new incarnation starts in it."""
        self.stats.wipes += 1
        self._log(f"{node.node_id} restarts WIPED (was epoch {node.epoch} voted "
                  f"{node.voted_for} end {len(node.journal)})")
        node.journal, node.epochs, node.hashes = [], [], []
        node.epoch, node.voted_for = 0, None
        node.seen_commit = 0
        node.disk, node.topic_events = {}, {}
        node.applied = node.applied_persisted = node.effects_from = 0
        node.start = 0  # the snapshot went with the directory
        node.incarnation += 1
        node.learner = self.wipe_rule == "learner"
        node.wipe_pending = False

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        assert not node.up
        self.stats.restarts += 1
        if node.wipe_pending:
            self._wipe(node)
        real = node.seen_commit
        commit = 0 if self.rng.random() < 0.3 else self.rng.randint(0, real)
        if self.apply_rule == "once":  # as node.py: the applied index is a commit index too
            commit = min(max(commit, node.applied_persisted), len(node.journal))
        node.state = initial_state(node.config, node.epoch, node.voted_for, node.view(),
                                   commit, self.now, node.rng, learner=node.learner)
        # A commit index the checks never saw would skip their state machine safety check.
        assert node.state.commit <= real, (f"{node_id} restarts with commit "
                                           f"{node.state.commit}, the checks saw {real}")
        node.seen_commit = node.state.commit
        node.life += 1
        # reconcile, then apply the committed prefix again: effects only from the persisted
        # applied index (the old rule: all of them again, by name).
        node.disk = reconciled_disk(node, node.state.commit)
        node.applied = node.start  # as node.py: the snapshot's entries are applied
        node.effects_from = (min(node.applied_persisted, len(node.journal))
                             if self.apply_rule == "once" else 0)
        self._apply_commits(node, node.state.commit)
        self._log(f"{node_id} restarts: epoch {node.epoch} voted {node.voted_for} "
                  f"end {len(node.journal)} commit {node.state.commit}")
        self._check_node(node)

    def compact(self, node: SimNode) -> None:
        """As node.py's _maybe_compact: the applied prefix becomes the snapshot."""
        node.start = node.applied
        node.applied_persisted = max(node.applied_persisted, node.start)
        self.stats.compactions += 1
        self._log(f"{node.node_id} compacts below {node.start}")
        self._step(node, LogChanged(node.view()))

    def transfer(self, node_id: int, target: int | None = None,
                 deadline_s: float | None = None) -> None:
        """Tell a leader to hand over (as `ReplicationNode.transfer_leadership`), to `target`
        or (None) half the time a random voter, else the one it finds best caught up; by
        `deadline_s` (None: a random one within `Faults.transfer_deadline_max_s`)."""
        node = self.nodes[node_id]
        if target is None and self.rng.random() < 0.5:
            target = self.rng.choice(sorted(node.config.peers))
        if deadline_s is None:
            deadline_s = self.now + self.rng.uniform(0.0, self.faults.transfer_deadline_max_s)
        self.stats.transfers += 1
        self._step(node, TransferLeadership(target, deadline_s))

    def client_append(self, node_id: int) -> str | None:
        """A client's write at a node that believes it leads (a stale leader may, too). A
        leader handing over takes none (replica_manager.py: it holds no lease); a produce that
        passed its lease check just before is an append landing late (`Faults.unannounced`)."""
        node = self.nodes[node_id]
        if not node.up or node.state.role is not Role.LEADER or node.state.transfer_to is not None:
            return None
        if node.landing is not None:
            return None  # one at a time
        self._payloads += 1
        payload = f"c{self._payloads}" + self._topic_op(node)
        self.stats.client_appends += 1
        epoch = node.state.epoch
        held_s = (self.rng.uniform(0.0, self.faults.ack_hold_max_s)
                  if self.rng.random() < self.faults.ack_hold else 0.0)
        waiter = Waiter(node_id, node.life, len(node.journal), epoch, payload, self.now,
                        self.now + held_s)
        if self.rng.random() < self.faults.unannounced:
            node.landing = ((epoch, payload), waiter)  # lands during the node's next step
            return payload
        self._append(node, (epoch, payload))
        self.waiters.append(waiter)
        self._step(node, LogChanged(node.view()))
        return payload

    def _topic_op(self, node: SimNode) -> str:
        """As replica_manager.py: create a topic that is not on disk, delete one that is."""
        if self.rng.random() >= self.faults.topic_ops:
            return ""
        topic = self.rng.choice(TOPICS)
        pending = any(topic_op(payload) == ("delete", topic)
                      for _epoch, payload in node.journal[node.state.commit:])
        if pending:
            return ""  # its delete is on the way (a client would wait for it)
        if topic in node.disk:
            self.stats.topic_deletes += 1
            return f"-{topic}"
        self.stats.topic_creates += 1
        return f"+{topic}"

    # -- acknowledgements ----------------------------------------------------------------------

    def _settle_acks(self) -> None:
        keep: list[Waiter] = []
        for waiter in self.waiters:
            node = self.nodes[waiter.node_id]
            if not node.up or node.life != waiter.life:
                continue  # the broker died: the client times out and retries
            if self.now < waiter.held_until_s:
                keep.append(waiter)  # the answer is held (a pipelined produce, a pause)
                continue
            if self._acknowledged(node, waiter):
                self.stats.acks += 1
                if (waiter.index >= len(self.committed)
                        or self.committed[waiter.index] != (waiter.epoch, waiter.payload)):
                    committed = (self.committed[waiter.index]
                                 if waiter.index < len(self.committed) else None)
                    raise SafetyViolation(
                        f"{node.node_id} acknowledged {waiter.payload} (index {waiter.index}, "
                        f"epoch {waiter.epoch}), but the entry committed there is {committed}")
            elif (node.state.role is not Role.LEADER or node.state.epoch != waiter.epoch):
                self.stats.not_leader_answers += 1
            elif self.now - waiter.since_s < ACK_TIMEOUT_S:
                keep.append(waiter)
        self.waiters = keep

    def _acknowledged(self, node: SimNode, waiter: Waiter) -> bool:
        """replica_manager.py's rule: the commit passed the index and the entry there is of the
        append's epoch (node.entry_committed); a mutant may use the index alone."""
        if node.state.commit <= waiter.index:
            return False
        if self.ack_rule == "index":
            return True
        return (waiter.index < len(node.journal)
                and node.journal[waiter.index][0] == waiter.epoch)

    # -- the network -------------------------------------------------------------------------

    def _send(self, sender: int, to: int, body: object) -> None:
        faults = self.faults
        rng = self.rng
        self.stats.sent += 1
        copies = 2 if rng.random() < faults.duplicate else 1
        self.stats.duplicates += copies - 1
        for _ in range(copies):
            if rng.random() < faults.drop or frozenset((sender, to)) in self.cut:
                self.stats.drops += 1
                continue
            delay = rng.uniform(0.0, faults.delay_max_s)
            if rng.random() < faults.long_delay:
                delay = rng.uniform(0.0, faults.long_delay_max_s)
            self._seq += 1
            heapq.heappush(self.network, Packet(self.now + delay, self._seq, to, sender, body))

    def _deliver(self, packet: Packet) -> None:
        node = self.nodes[packet.to]
        if not node.up:
            return
        if self.now < node.paused_until:  # waits in the paused broker's socket
            packet.deliver_at = node.paused_until
            heapq.heappush(self.network, packet)
            return
        if frozenset((packet.sender, packet.to)) in self.cut:
            self.stats.drops += 1
            return
        body = packet.body
        if isinstance(body, VoteRequest):
            self._answer(node, packet.sender, body)
        elif isinstance(body, VoteResponse):
            self._step(node, body)
        elif isinstance(body, FetchMessage):
            self._answer(node, packet.sender, body)
        elif isinstance(body, FetchAnswerMessage):
            self._fetch_answered(node, packet.sender, body)
        else:  # pragma: no cover
            raise AssertionError(f"unknown packet {body!r}")

    def _answer(self, node: SimNode, sender: int, body) -> None:
        event = body.request if isinstance(body, FetchMessage) else body
        actions = self._step(node, event)
        if actions is None:
            return  # died mid-step
        answers = [a for a in actions if isinstance(a, AnswerVote | AnswerFetch)]
        if len(answers) != 1:
            raise SafetyViolation(f"{node.node_id} gave {len(answers)} answers to {event}")
        answer = answers[0]
        if isinstance(answer, AnswerVote):
            self._send(node.node_id, sender, VoteResponse(node.node_id, answer.epoch,
                                                          answer.granted, answer.leader_id,
                                                          answer.pre_vote))
            return
        entries: tuple[Entry, ...] = ()
        snapshot: tuple[Entry, ...] = ()
        if answer.outcome is Outcome.ENTRIES:
            start = answer.fetch_end
            if start < node.start:
                raise SafetyViolation(f"{node.node_id} sends entries from {start}, below its "
                                      f"snapshot at {node.start}")
            count = self.rng.randint(1, self.fetch_entries_max)
            entries = tuple(node.journal[start:start + count])
        elif answer.outcome is Outcome.SNAPSHOT:
            self.stats.snapshot_answers += 1
            snapshot = tuple(node.journal[:node.start])
        elif answer.outcome is Outcome.TIMEOUT_NOW:
            self.stats.timeout_nows += 1
        self._send(node.node_id, sender, FetchAnswerMessage(answer, body.request_id, entries,
                                                            self.now, snapshot))

    def _maybe_fetch(self, node: SimNode) -> None:
        if node.outstanding is not None:
            if self.now - node.outstanding[1] < self.request_timeout_s:
                return
            node.outstanding = None  # given up on; a late answer is never read
            node.read_answer = None  # and the next request goes on a new connection
        target = fetch_target(node.state)
        unheard = sorted(unheard_voters(node.config, node.state))
        if unheard and (target is None or self.rng.random() < 0.5):
            target = self.rng.choice(unheard)  # as node.py: a learner asks every voter
        if target is None:
            peers = sorted(node.config.peers)
            if not peers:
                return
            node.next_peer = (node.next_peer + 1) % len(peers)
            target = peers[node.next_peer]
        view = node.state.log  # as node.py: what the state machine knows, not the journal
        read = node.read_answer
        confirmed = read[2] if read is not None and read[:2] == (target, node.state.epoch) \
            else None
        request = FetchRequest(node.node_id, node.state.epoch, view.end, view.last_epoch,
                               node.incarnation, node.state.learner, confirmed)
        self._request_ids += 1
        node.outstanding = (self._request_ids, self.now, request)
        self._send(node.node_id, target, FetchMessage(request, self._request_ids))

    def _fetch_answered(self, node: SimNode, sender: int, message: FetchAnswerMessage) -> None:
        if node.outstanding is None or node.outstanding[0] != message.request_id:
            self.stats.stale_answers += 1  # duplicated, or given up on: node.py never reads it
            return
        node.outstanding = None
        answer = message.answer
        entries = message.entries
        node.read_answer = (sender, answer.epoch, message.answered_s)
        event = FetchAnswered(sender, answer.outcome, answer.epoch, answer.leader_id,
                              answer.diverging_epoch, answer.diverging_end)
        actions = self._step(node, event, finish=False)
        if actions is None:
            return
        for action in actions:
            if not node.up:
                return
            if isinstance(action, ApplyEntries):
                if answer.outcome is not Outcome.ENTRIES:
                    raise SafetyViolation(f"ApplyEntries on a {answer.outcome} answer")
                # As node.py: the commit first (below fetch_end), then the entries.
                if self._step(node, LogChanged(node.view(), answer.commit,
                                               answer.fetch_end)) is None:
                    return
                applied = 0
                if len(node.journal) != answer.fetch_end:
                    # A tail the request did not know of (an append announced late): as
                    # node.py, nothing is applied; the next fetch finds the divergence.
                    self.stats.stale_tails += 1
                else:
                    for entry in entries:
                        index = len(node.journal)
                        # As node.py: a committed DELETE goes before the next CREATE.
                        if (topic_op(entry[1])[0] == "create" and index > answer.fetch_end
                                and self.create_rule == "replace"
                                and self._step(node, LogChanged(node.view(), answer.commit,
                                                                index)) is None):
                            return
                        self._append(node, entry)
                        applied += 1
                self.stats.entries_applied += applied
                if self._step(node, LogChanged(node.view(), answer.commit,
                                               answer.fetch_end + applied)) is None:
                    return
            elif isinstance(action, Truncate):
                self._truncate(node, action.end)
                if self._step(node, LogChanged(node.view())) is None:
                    return
            elif isinstance(action, InstallSnapshot):
                if not self._install(node, message.snapshot):
                    continue
                if self._step(node, LogChanged(node.view(), answer.commit,
                                               len(message.snapshot))) is None:
                    return
        if node.up:
            self._check_node(node)

    # -- one state machine step and its actions ------------------------------------------------

    def _step(self, node: SimNode, event, finish: bool = True) -> list | None:
        """Step the node's state machine and carry out its actions; None if it died doing so.
        `finish`: check the node against its journal at the end (the caller does it itself
        when it still has ApplyEntries/Truncate to carry out)."""
        # As node.py's _step_locked: no step on a view without the whole journal.
        if (not isinstance(event, LogChanged) and node.unannounced
                and self.view_rule == "refresh"
                and self._step(node, LogChanged(node.view())) is None):
            return None
        landed = self._land(node) if node.landing is not None else 0
        before = node.state
        if isinstance(event, LogChanged) and event.log == node.view().truncated(
                len(node.journal) - landed):
            node.unannounced = landed  # it sees the whole journal but what just landed
        state, actions = step(node.config, before, event, self.now, node.rng)
        self.stats.steps += 1
        if self.trace is not None and actions:
            self._log(f"{node.node_id} <- {event}: {actions}")
        node.state = state
        crash_at = None
        if self.crash_next_step_after is not None:
            crash_at, self.crash_next_step_after = self.crash_next_step_after, None
        elif self.rng.random() < self.faults.crash_mid_step:
            crash_at = self.rng.randrange(len(actions) + 1)  # len: after all of them
        for position, action in enumerate(actions):
            if position == crash_at:
                break
            self._execute(node, event, action, state)
        if crash_at is not None:
            self.stats.crashes_mid_step += 1
            self.crash(node.node_id)
            return None
        if before.role is Role.LEADER and state.role is not Role.LEADER:
            self.stats.step_downs += 1
        self._observe(node)
        if finish:
            self._check_node(node)
        return actions

    def _execute(self, node: SimNode, event, action, state: RaftState) -> None:
        node_id = node.node_id
        if isinstance(action, PersistQuorum):
            if action.epoch < node.epoch:
                raise SafetyViolation(f"{node_id} persisted epoch {action.epoch} below "
                                      f"{node.epoch}")
            if action.epoch == node.epoch and node.voted_for not in (None, action.voted_for):
                raise SafetyViolation(f"{node_id} re-voted in epoch {action.epoch}: "
                                      f"{node.voted_for} -> {action.voted_for}")
            node.epoch, node.voted_for = action.epoch, action.voted_for
        elif isinstance(action, SendVotes):
            if action.pre_vote:
                self.stats.pre_votes += 1
            else:
                self.stats.candidacies += 1
                if (node.epoch, node.voted_for) != (action.epoch, node_id):
                    raise SafetyViolation(f"{node_id} asks for votes in epoch {action.epoch} "
                                          "before persisting its own vote")
            if action.transfer:
                self.stats.transfer_candidacies += 1
                node.transfer_epoch = action.epoch
            request = VoteRequest(node_id, action.epoch, action.last_epoch, action.end,
                                  action.pre_vote, action.transfer)
            for peer in sorted(action.to):
                self._send(node_id, peer, request)
        elif isinstance(action, AppendNoop):
            if (node.epoch, node.voted_for) != (action.epoch, node_id):
                raise SafetyViolation(f"{node_id} leads epoch {action.epoch} without its "
                                      f"persisted vote ({node.epoch}, {node.voted_for})")
            self._append(node, (action.epoch, "noop"))
        elif isinstance(action, AnswerVote):
            if action.granted and not action.pre_vote:
                assert isinstance(event, VoteRequest)
                if (node.epoch, node.voted_for) != (action.epoch, event.candidate):
                    raise SafetyViolation(f"{node_id} grants {event.candidate} a vote in epoch "
                                          f"{action.epoch} before persisting it "
                                          f"({node.epoch}, {node.voted_for})")
                previous = self.votes.setdefault((action.epoch, node_id), event.candidate)
                if previous != event.candidate:
                    raise SafetyViolation(f"{node_id} voted twice in epoch {action.epoch}: "
                                          f"{previous} and {event.candidate}")
        elif isinstance(action, BecomeVoter):
            if not node.learner:
                raise SafetyViolation(f"{node_id} promoted, but it was a voter")
            node.learner = False
            self.stats.promotions += 1
            self._log(f"{node_id} becomes a voter in epoch {state.epoch}")
        elif isinstance(action, CommitAdvanced):
            self.stats.commits += 1
            if action.commit != state.commit:
                raise SafetyViolation(f"CommitAdvanced({action.commit}) but state has "
                                      f"{state.commit}")
            self._apply_commits(node, action.commit)
            self._observe_commit(node)
        elif isinstance(action, RoleChanged):
            if action.role is Role.LEADER:
                self.stats.elections += 1
                if node.transfer_epoch == action.epoch:
                    self.stats.transfer_wins += 1
                node.outstanding = None  # a leader does not fetch
                self._log(f"{node_id} LEADS epoch {action.epoch}")
            elif action.role is Role.CANDIDATE:
                pass
        # AnswerFetch: the caller sends it; ApplyEntries and Truncate: the fetch path.

    def _land(self, node: SimNode) -> int:
        """Another thread's produce appends at the journal (fenced: only while the node still
        leads the append's epoch) and pauses before telling the state machine. Returns the
        number of entries appended (0 or 1)."""
        (entry, waiter), node.landing = node.landing, None
        state = node.state
        if state.role is not Role.LEADER or state.epoch != entry[0]:
            self.stats.not_leader_answers += 1  # the journal's fence: NOT_LEADER at once
            return 0
        waiter.index = len(node.journal)
        self._append(node, entry)
        self.waiters.append(waiter)
        node.unannounced += 1
        self.stats.unannounced_appends += 1
        return 1

    # -- the journal -------------------------------------------------------------------------

    def _append(self, node: SimNode, entry: Entry) -> None:
        index = len(node.journal)
        epoch = entry[0]
        if node.epochs and epoch < node.epochs[-1][0]:
            raise SafetyViolation(f"{node.node_id} appends epoch {epoch} after "
                                  f"{node.epochs[-1][0]}")
        if not node.epochs or node.epochs[-1][0] != epoch:
            node.epochs.append((epoch, index))
        previous = node.hashes[-1] if node.hashes else 0
        digest = hash((previous, entry))
        node.journal.append(entry)
        node.hashes.append(digest)
        kind, topic = topic_op(entry[1])
        if kind is not None:
            node.topic_events.setdefault(topic, []).append((index, kind, epoch))
        if kind == "create":
            self._create_on_append(node, topic, (epoch, index))
        known = self.canon.setdefault((index, epoch), digest)
        if known != digest:
            raise SafetyViolation(f"log matching: node {node.node_id} holds an entry of epoch "
                                  f"{epoch} at {index} whose journal differs from another's")

    def _create_on_append(self, node: SimNode, topic: str, topic_id: TopicId) -> None:
        """The topic with its entry, replacing an older incarnation still on disk."""
        if self.create_rule == "replace":
            node.disk[topic] = topic_id
        else:
            node.disk.setdefault(topic, topic_id)

    def _truncate(self, node: SimNode, end: int) -> None:
        state = node.state
        if end < node.start:
            raise SafetyViolation(f"{node.node_id} truncates to {end} below its snapshot at "
                                  f"{node.start}")
        if end < state.commit:
            raise SafetyViolation(f"{node.node_id} truncates to {end} below its commit "
                                  f"{state.commit}")
        for index in range(end, min(len(node.journal), len(self.committed))):
            if node.journal[index] == self.committed[index]:
                raise SafetyViolation(f"{node.node_id} truncates to {end}, dropping the "
                                      f"committed entry {index} {self.committed[index]}")
        if end < len(node.journal):
            self.stats.truncations += 1
            self._log(f"{node.node_id} truncates {len(node.journal)} -> {end}")
        for _epoch, payload in node.journal[end:]:
            kind, topic = topic_op(payload)
            if kind == "create":  # as node.py: a truncated CREATE's topic goes
                node.disk.pop(topic, None)
        for events in node.topic_events.values():
            while events and events[-1][0] >= end:
                events.pop()
        del node.journal[end:]
        del node.hashes[end:]
        while node.epochs and node.epochs[-1][1] >= end:
            node.epochs.pop()

    def _install(self, node: SimNode, prefix: tuple[Entry, ...]) -> bool:
        """As node.py's _install_snapshot: the whole journal becomes the leader's snapshot (a
        tail it did not vouch for goes too), the topics on disk the prefix's."""
        if len(prefix) <= len(node.journal):
            return False  # nothing new
        commit = node.state.commit
        if node.journal[:commit] != list(prefix[:commit]):
            raise SafetyViolation(f"{node.node_id}: a snapshot that differs from its committed "
                                  f"prefix below {commit}")
        # The snapshot is the leader's applied prefix: committed, and durable as this node's
        # applied index the moment it lands (a crash before the CommitAdvanced that follows
        # restarts with it as its commit), so the checks see it committed now.
        for index, entry in enumerate(prefix[node.seen_commit:], start=node.seen_commit):
            if index >= len(self.committed) or self.committed[index] != entry:
                raise SafetyViolation(f"state machine safety: {node.node_id} installs a "
                                      f"snapshot with {entry} at {index}, not committed there")
        node.journal, node.hashes, node.epochs, node.topic_events = [], [], [], {}
        for entry in prefix:
            self._append(node, entry)
        node.start = len(prefix)
        node.unannounced = 0  # the LogChanged after the install shows the whole journal
        node.disk = reconciled_disk(node, node.start)
        node.applied = node.start
        node.effects_from = max(node.effects_from, node.start)
        node.applied_persisted = max(node.applied_persisted, node.start)
        node.seen_commit = max(node.seen_commit, node.start)
        self.stats.snapshot_installs += 1
        self._log(f"{node.node_id} installs a snapshot of {node.start} entries")
        return True

    def _apply_commits(self, node: SimNode, commit: int) -> None:
        """node.py's _apply_commits_locked: committed deletes, in order, once."""
        for index in range(node.applied, commit):
            kind, topic = topic_op(node.journal[index][1])
            if kind == "delete" and index >= node.effects_from:
                named = node.topic_id_before(index, topic)
                newest = node.topic_id_before(len(node.journal), topic)
                if self.apply_rule == "once" and named is not None and newest != named:
                    self.stats.deletes_of_older_incarnations += 1
                else:
                    node.disk.pop(topic, None)
                node.applied_persisted = max(node.applied_persisted, index + 1)
        node.applied = max(node.applied, commit)

    # -- the invariants ------------------------------------------------------------------------

    def _observe(self, node: SimNode) -> None:
        """After every step: election safety, leader completeness, state machine safety."""
        state = node.state
        if state.role is Role.LEADER:
            leader = self.leader_of_epoch.setdefault(state.epoch, node.node_id)
            if leader != node.node_id:
                raise SafetyViolation(f"two leaders in epoch {state.epoch}: {leader} and "
                                      f"{node.node_id}")
            key = (node.node_id, state.epoch)
            if key not in self.leaders_checked:
                self.leaders_checked.add(key)
                for index, entry in enumerate(self.committed):
                    if self.commit_epoch[index] < state.epoch:
                        self._leader_holds(node, index, entry)
        self._observe_commit(node)

    def _observe_commit(self, node: SimNode) -> None:
        """State machine safety for the entries the node's commit index newly covers. Run
        after every step AND as soon as a CommitAdvanced is carried out: the node acts on it
        at once (applies deletes, persists its applied index, which a restart takes as its
        commit index), so a crash later in the same step must not hide it from the checks."""
        state = node.state
        if state.commit > node.seen_commit:
            if state.commit > len(node.journal):
                raise SafetyViolation(f"{node.node_id} commits {state.commit} past its "
                                      f"journal end {len(node.journal)}")
            for index in range(node.seen_commit, state.commit):
                entry = node.journal[index]
                if index < len(self.committed):
                    if self.committed[index] != entry:
                        raise SafetyViolation(
                            f"state machine safety: {node.node_id} commits {entry} at "
                            f"{index}, where {self.committed[index]} was committed")
                    continue
                assert index == len(self.committed)
                self.committed.append(entry)
                self.stats.committed_entries += 1
                self.commit_epoch.append(state.epoch)
                for other in self.nodes.values():
                    if (other.up and other.state.role is Role.LEADER
                            and other.state.epoch > state.epoch):
                        self._leader_holds(other, index, entry)
            node.seen_commit = state.commit

    def _leader_holds(self, leader: SimNode, index: int, entry: Entry) -> None:
        if index >= len(leader.journal) or leader.journal[index] != entry:
            raise SafetyViolation(f"leader completeness: leader {leader.node_id} of epoch "
                                  f"{leader.state.epoch} lacks committed entry {entry} at "
                                  f"{index}")

    def _check_node(self, node: SimNode) -> None:
        """The edge agrees with the state machine once a step is fully carried out."""
        state = node.state
        known = node.view().truncated(len(node.journal) - node.unannounced)
        if state.log != known:
            raise SafetyViolation(f"{node.node_id}: state machine sees {state.log}, the "
                                  f"journal is {node.view()} ({node.unannounced} unannounced)")
        if node.applied != state.commit:
            raise SafetyViolation(f"{node.node_id}: applied {node.applied}, commit "
                                  f"{state.commit}")
        self._check_topics(node)
        if (state.epoch, state.voted_for) != (node.epoch, node.voted_for):
            raise SafetyViolation(f"{node.node_id}: state ({state.epoch}, {state.voted_for}) "
                                  f"but persisted ({node.epoch}, {node.voted_for})")
        if state.commit > len(node.journal):
            raise SafetyViolation(f"{node.node_id}: commit {state.commit} past the journal")
        if node.epochs and node.epochs[-1][0] > state.epoch:
            raise SafetyViolation(f"{node.node_id}: journal holds epoch {node.epochs[-1][0]} "
                                  f"above its own {state.epoch}")

    def _check_topics(self, node: SimNode) -> None:
        """The newest incarnation of a topic not deleted after it is on disk; one whose delete
        was applied is not; nothing else is (an older incarnation never outlives a newer)."""
        newest: dict[str, tuple[TopicId, int | None]] = {}  # topic -> (id, index of its delete)
        for topic, events in node.topic_events.items():
            deleted_at = None
            for at, kind, epoch in reversed(events):  # only deletes follow the last create
                if kind == "create":
                    newest[topic] = ((epoch, at), deleted_at)
                    break
                deleted_at = at
        for topic, (topic_id, deleted_at) in newest.items():
            held = node.disk.get(topic)
            if deleted_at is None and held != topic_id:
                raise SafetyViolation(f"{node.node_id}: topic {topic} {topic_id} (created, not "
                                      f"deleted) is not on disk (holds {held})")
            if deleted_at is not None and deleted_at < node.applied and held is not None:
                raise SafetyViolation(f"{node.node_id}: topic {topic} {held} on disk after the "
                                      f"delete at {deleted_at} was applied")
        for topic, held in node.disk.items():
            if topic not in newest or newest[topic][0] != held:
                raise SafetyViolation(f"{node.node_id}: topic {topic} {held} on disk is not "
                                      "the journal's newest incarnation")

    def check_all(self) -> None:
        """The whole-history checks, over every journal (slower; call now and then)."""
        for node in self.nodes.values():
            limit = min(node.seen_commit, len(node.journal)) if node.up else 0
            if node.journal[:limit] != self.committed[:limit]:
                raise SafetyViolation(f"{node.node_id}'s committed prefix differs")
        nodes = list(self.nodes.values())
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                for index in range(min(len(a.journal), len(b.journal)) - 1, -1, -1):
                    if a.journal[index][0] == b.journal[index][0]:
                        if a.journal[:index + 1] != b.journal[:index + 1]:
                            raise SafetyViolation(f"log matching: {a.node_id} and "
                                                  f"{b.node_id} at {index}")
                        break

    # -- observations --------------------------------------------------------------------------

    def leaders(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.up and n.state.role is Role.LEADER]

    def current_leader(self) -> int | None:
        """The leader of the highest epoch, if it still leads."""
        leaders = [self.nodes[n] for n in self.leaders()]
        if not leaders:
            return None
        best = max(leaders, key=lambda n: n.state.epoch)
        top = max(n.state.epoch for n in self.nodes.values() if n.up)
        return best.node_id if best.state.epoch == top else None

    def index_of(self, node_id: int, payload: str) -> int | None:
        for index, entry in enumerate(self.nodes[node_id].journal):
            if entry[1] == payload:
                return index
        return None

    def _log(self, line: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.now:9.3f} {line}")
