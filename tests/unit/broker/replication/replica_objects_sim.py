"""A cluster of real brokers' replication objects on a simulated network, stepped in one thread.

Each broker is what a broker process holds for one replication group: a `Log` in its own data
directory, a `ReplicationNode` over it (journal, quorum store, reconcile at open) and a
`ReplicaManager` on top; the leader's side of REPLICA_FETCH is the handler's own answer code
(`replica_fetch.replica_fetch_answer`), so an answer's batch bytes are read from the leader's
partition files as sendfile would send them, and the follower decodes the wire answer. No loop
thread runs: `Cluster.round` plays each running broker's loop round by hand (node.py's
`_one_round`: tick, compaction, vote rounds, one fetch) on a shared simulated `Clock`.

The network (`Faults`): a follower keeps one REPLICA_FETCH in flight, as node.py's blocking
fetch does; requests and answers are dropped, delayed by whole rounds (answers to different
followers arrive out of order), or cut by a partition; a follower gives up after
`request_timeout_s`, or at once when its epoch or leader changed, and then fetches on a new
connection (a new `FetchSession`: the lease counts on it). A caught-up follower's long-poll is
held by the network until the leader's journal grows or `fetch_wait_ms` passed. Vote rounds
and SNAPSHOT_FETCH (a follower's install) are answered within the round, unless cut, dropped,
or the peer is paused or down. Brokers are paused (SIGSTOP: not stepped, answer nothing) for
many rounds, and restarted (the Log and node closed, reopened on the same directory after some
rounds down: recovery and reconcile run). At most a minority is faulted at once.

The workload at whoever leads: idempotent produce (acks=all: answered once the node's commit
holds the batch's own entry, `entry_committed`, through the manager's own await), topic create,
delete and re-create of the same few names through the ReplicaManager. Record values name the
topic incarnation they were written to, so a replica's partition can be checked to hold only
its own incarnation's records.

Checks:
- after every round (`SafetyViolation`): one leader per epoch; the committed prefixes agree
  (every committed entry a broker holds equals the one first seen committed at that index); an
  acknowledgement names the committed entry; every batch a leader serves is the very batch its
  entry was written with (never another incarnation's bytes);
- no spin (`SpinFailure`): a follower behind the leader never gets more than
  `SPIN_ANSWERS_MAX` answers in a row that leave it where it was (an empty ENTRIES answer; a
  SNAPSHOT answer at the journal end of the last one, once no message is lost: its install
  failed); the handler never fails (`HandlerFailure`: UnknownServerError, the journal and
  the log disagreeing);
- `converge` (`LivenessFailure`): once faults stop, within a bound of rounds one leader holds
  the lease and every replica's journal end, commit, topics, incarnations and partition bytes
  equal the leader's;
- `check_history`: every acknowledged create, delete and batch is in the converged state of
  its own incarnation (or its incarnation was deleted by a committed entry); each record once;
  every partition holds only records of its own incarnation;
- `check_idle`: a converged, idle cluster fetches only at the leader's journal end (long-polls)
  and answers each follower at most once per long-poll.

Where it differs from a broker process, deliberately: a long-polled fetch is stepped by the
leader when it is answered, at the end of the hold (node.py steps it on arrival), so the lease
and check-quorum hear a caught-up follower up to `fetch_wait_ms` late (the election timeouts
leave room for it); vote rounds are answered within the round; a restart is clean (the page
cache survives: fsync policy `none`, no wiped directories, so no learners); a wait in the one
thread (`wait_changed`: an ack, a lease) ends at once, since nothing can change meanwhile; one
replication group (the metadata group) per cluster.

Failures name the seed and end with the last events of the schedule (`Cluster.events`).
Thread-safety: none needed; everything runs on the test's thread (the Log's reaper deletes
directories on its own thread, as in a broker).
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from common.kaska.errors import (
    DuplicateSequenceError,
    KaskaError,
    NotEnoughReplicasError,
    NotLeaderError,
    OutOfOrderSequenceError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.produce import ACKS_ALL
from common.kaska.topic_name import is_internal
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.handlers import replica_fetch
from services.broker.replication import raft
from services.broker.replication.fetch_answers import FetchSession
from services.broker.replication.journal import Journal, JournalEntry, TopicId
from services.broker.replication.node import PeerAddress, ReplicationConfig, ReplicationNode
from services.broker.replication.wire.replica_fetch import (
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.vote import VoteRequest as WireVoteRequest
from services.broker.storage.log import Log
from tests.unit.broker.replication.founding import founding_voter
from tests.unit.broker.replication.raft_sim import LivenessFailure, SafetyViolation
from tests.unit.broker.replication.test_replication_safety import Clock
from tests.unit.broker.storage.batches import SMALL, batch, new_producer_id, records

ROUND_S = 0.05  # simulated seconds per round: the loop's tick interval
# The leader steps a long-polled fetch when it answers it, at the end of the hold (node.py
# steps it on arrival): its lease and check-quorum hear a caught-up follower up to one
# fetch_wait_ms late, which a lease of 0.8 of this leaves room for.
ELECTION_TIMEOUT_MIN_S = 1.0
SPIN_ANSWERS_MAX = 3  # answers in a row that leave a follower behind where it was
TOPIC_NAMES = ("d", "e", "f")
PARTITIONS_MAX = 2
ACK_TIMEOUT_ROUNDS = 200  # a client gives up on an answer after this many rounds
EVENTS_KEPT = 300
READ_ALL_BYTES = 1 << 30


class SpinFailure(AssertionError):
    """A follower behind its leader got answers that left it there, again and again."""


class HandlerFailure(AssertionError):
    """The REPLICA_FETCH answer code raised (the journal and the log disagree)."""


@dataclass(frozen=True)
class Faults:
    """Probabilities are per message (drops), per round (the rest). A zero draws nothing."""

    drop: float = 0.05  # a request or an answer is lost
    delay_rounds_max: int = 2  # a request or an answer arrives up to this many rounds late
    partition: float = 0.01  # a broker is cut off from the others
    partition_rounds_max: int = 60
    pause: float = 0.015  # a broker is SIGSTOPped
    pause_rounds_max: int = 160
    restart: float = 0.006  # a broker is stopped, and reopened on its directory later
    down_rounds_max: int = 40
    produce: float = 0.7  # a produce at the leader
    create: float = 0.06  # a create of an absent name at the leader
    delete: float = 0.05  # a delete of a present name at the leader


CALM = Faults(drop=0.0, delay_rounds_max=0, partition=0.0, pause=0.0, restart=0.0,
              produce=0.0, create=0.0, delete=0.0)
# Followers paused long across churn, nothing else: the path of a lagging replica.
PAUSES = Faults(drop=0.0, delay_rounds_max=0, partition=0.0, pause=0.03, pause_rounds_max=240,
                restart=0.0, create=0.1, delete=0.08)
# Everything: lost and late messages, partitions, pauses, restarts, churn.
HOSTILE = Faults(drop=0.1, delay_rounds_max=3, partition=0.015, pause=0.02, restart=0.01,
                 create=0.08, delete=0.06)
PROFILES = {"pauses": PAUSES, "hostile": HOSTILE}


@dataclass
class Stats:
    rounds: int = 0
    elections: int = 0  # distinct (epoch, leader) seen
    produces: int = 0  # appends taken by a leader
    acks: int = 0  # produces acknowledged (acks=all)
    creates: int = 0  # creates acknowledged
    deletes: int = 0  # deletes acknowledged
    recreates: int = 0  # creates of a name that had an incarnation before
    answers: int = 0  # REPLICA_FETCH answers made by the handler code
    entries_served: int = 0
    skipped_served: int = 0  # BATCH entries answered as SKIPPED
    long_polls: int = 0  # fetches held at a caught-up leader
    drops: int = 0
    pauses: int = 0
    paused_across_recreates: int = 0  # pauses during which a name was deleted and re-created
    partitions: int = 0
    restarts: int = 0
    abandoned_fetches: int = 0  # given up on (timeout, epoch or leader change)
    round_errors: int = 0  # KaskaErrors a loop round swallowed (as node.py's `_run`)
    snapshot_answers: int = 0
    installs: int = 0  # snapshots installed (summed over node lives)
    compactions: int = 0

    def add(self, other: Stats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Flight:
    """A follower's one REPLICA_FETCH in flight, and its answer once made."""

    target: int
    target_life: int
    request: ReplicaFetchRequest
    sent_s: float
    arrives_round: int
    lost: bool = False
    held_until_s: float | None = None  # a long-poll at the leader
    answer: bytes | None = None  # the wire answer (prefix + batch bytes)
    answer_round: int = 0


@dataclass
class Producer:
    """An idempotent producer of one partition of one topic incarnation."""

    producer_id: bytes = field(default_factory=new_producer_id)
    next_sequence: int = 0
    retry: tuple[int, tuple[bytes, ...]] | None = None  # (sequence, values) not acknowledged
    busy: bool = False  # a batch is waiting for its answer


@dataclass
class Pending:
    """A leader's write waiting for its answer (acks=all)."""

    kind: str  # "produce", "create", "delete"
    broker: int
    life: int
    since_round: int
    entry: JournalEntry | None  # None: a retry of a batch whose entry is compacted
    epoch: int  # the leader epoch it was taken in
    topic: str
    settle: Callable[[], None]  # the manager's await: returns, or raises when not acked
    producer: Producer | None = None
    partition: int = 0
    sequence: int = 0
    values: tuple[bytes, ...] = ()
    topic_id: TopicId | None = None


class Broker:
    """One broker's objects, reopened on the same data directory at a restart."""

    def __init__(self, cluster: Cluster, node_id: int, data_dir: Path) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.data_dir = data_dir
        self.life = 0
        self.log: Log | None = None
        self.node: ReplicationNode | None = None
        self.manager: ReplicaManager | None = None
        self.paused_until = 0  # round
        self.recreates_at_pause = 0  # the cluster's acknowledged re-creates when paused
        self.down_until = 0  # round
        self.flight: Flight | None = None
        self.sessions: dict[tuple[int, int], FetchSession] = {}  # (leader, its life)
        self.seen_commit = 0
        self.behind_empty = 0  # answers in a row that left it behind, where it was
        self.last_fetch_end = -1  # of its last answered fetch
        self.idle_answers = 0
        self.open()

    @property
    def up(self) -> bool:
        return self.node is not None

    def open(self) -> None:
        cluster = self.cluster
        self.log = Log(self.data_dir, SMALL)
        config = cluster.config_of(self.node_id)
        founding_voter(self.data_dir, config)
        self.node = ReplicationNode(config, self.log, self.data_dir, clock=cluster.clock,
                                    rng=random.Random(cluster.rng.getrandbits(64)))
        self.node._peer_requests.send = self._send_snapshot_fetch
        # One thread: nothing can change while a caller would wait (an ack, a lease, a
        # long-poll -- held by the network instead), so a wait ends at once, as it is.
        self.node.wait_changed = lambda predicate, _timeout_s: predicate()
        self.manager = ReplicaManager(self.node, ("127.0.0.1", 9000 + self.node_id), self.log,
                                      ack_timeout_s=0.0)
        self.seen_commit = self.node.journal.start
        self.behind_empty = 0
        self.last_fetch_end = -1

    def close(self) -> None:
        if self.node is not None:
            self.cluster.stats.installs += self.node.counters.snapshots_installed
            self.cluster.stats.compactions += self.node.counters.compactions
            self.node.stop()
            self.node = None
            self.manager = None
        if self.log is not None:
            self.log.close()
            self.log = None
        self.flight = None
        self.sessions.clear()
        self.life += 1

    def session(self, leader: int, leader_life: int) -> FetchSession:
        return self.sessions.setdefault((leader, leader_life), FetchSession())

    def drop_connection(self, leader: int) -> None:
        for key in [key for key in self.sessions if key[0] == leader]:
            del self.sessions[key]

    def _send_snapshot_fetch(self, peer: int, request) -> Future | None:
        """The node's SNAPSHOT_FETCH (an install's copies) to `peer`, answered at once."""
        cluster = self.cluster
        target = cluster.brokers[peer]
        if not cluster.reaches(self.node_id, peer) or cluster.rng.random() < cluster.faults.drop:
            return None
        response, slices = target.node.answer_snapshot_fetch(request)
        future: Future = Future()
        future.set_result((0, response.encode_prefix() + read_slices(slices)))
        return future


def read_slices(slices) -> bytes:
    """The bytes sendfile would send for these file slices."""
    return b"".join(os.pread(piece.fd, piece.nbytes, piece.position) for piece in slices)


def done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def tagged_values(topic: str, topic_id: TopicId, partition: int, serial: int, count: int,
                  pad_bytes: int) -> tuple[bytes, ...]:
    """Record values naming their incarnation; fixed width, so batch sizes depend only on
    `count` and `pad_bytes`."""
    return tuple(b"%s|%05d.%07d|%d|%09d|" % (topic.encode(), topic_id.epoch, topic_id.index,
                                             partition, serial * 10 + k) + b"p" * pad_bytes
                 for k in range(count))


def incarnation_of_value(value: bytes) -> tuple[str, TopicId, int]:
    topic, topic_id, partition = value.split(b"|")[:3]
    epoch, index = topic_id.split(b".")
    return topic.decode(), TopicId(int(epoch), int(index)), int(partition)


def live_after_journal(journal: Journal, topic: str) -> bool:
    """Whether the journal's last word on `topic` (its entries, then its snapshot) is that it
    exists."""
    for entry in reversed(journal.entries()):
        if entry.topic == topic and entry.kind in (EntryKind.CREATE_TOPIC,
                                                   EntryKind.DELETE_TOPIC):
            return entry.kind is EntryKind.CREATE_TOPIC
    return topic in {described.name for described in journal.snapshot.topics}


def entry_key(entry: JournalEntry) -> tuple:
    """What must agree between replicas of a committed entry. A BATCH may arrive as SKIPPED
    (its incarnation deleted on the leader before it was served); the bytes check covers
    whether that was right."""
    kind = EntryKind.BATCH if entry.kind is EntryKind.SKIPPED else entry.kind
    return (entry.epoch, kind, entry.topic, entry.partition, entry.base_offset,
            entry.record_count, entry.partitions, entry.topic_id)


class Cluster:
    def __init__(self, base_dir: Path, size: int = 3, seed: int = 0,
                 faults: Faults = HOSTILE, journal_entries_max: int = 16,
                 fetch_entries_max: int = 4) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults
        self.ids = tuple(range(1, size + 1))
        self.journal_entries_max = journal_entries_max
        self.fetch_entries_max = fetch_entries_max
        self.clock = Clock()
        self.round_no = 0
        self.stats = Stats()
        self.events: deque[str] = deque(maxlen=EVENTS_KEPT)
        self.cut: set[int] = set()  # brokers cut off from every other
        self.cut_until = 0
        self.workload = True
        self.serial = 0
        self.pad_bytes = 0  # record padding for the next produces (directed tests vary it)
        self.pending: list[Pending] = []
        self.producers: dict[tuple[str, TopicId, int], Producer] = {}
        # -- the history the checks hold the cluster to --
        self.leader_of_epoch: dict[int, int] = {}
        self.committed: dict[int, tuple] = {}  # index -> entry_key, as first seen committed
        self.written: dict[tuple[int, int], tuple[bytes, ...]] = {}  # (index, epoch) -> values
        self.acked_batches: list[Pending] = []
        self.acked_creates: list[tuple[str, TopicId]] = []
        self.acked_deletes: list[tuple[str, TopicId | None]] = []
        self.ever_created: set[str] = set()
        self.idle_watch = False
        self.brokers = {node_id: Broker(self, node_id, base_dir / f"broker{node_id}")
                        for node_id in self.ids}

    def config_of(self, node_id: int) -> ReplicationConfig:
        peers = tuple(PeerAddress(peer, "127.0.0.1", 9000 + peer) for peer in self.ids
                      if peer != node_id)
        return ReplicationConfig(node_id=node_id, peers=peers,
                                 election_timeout_min_s=ELECTION_TIMEOUT_MIN_S,
                                 election_timeout_max_s=2 * ELECTION_TIMEOUT_MIN_S,
                                 journal_entries_max=self.journal_entries_max,
                                 fetch_entries_max=self.fetch_entries_max)

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()

    # -- observations ------------------------------------------------------------------------

    def event(self, line: str) -> None:
        self.events.append(f"r{self.round_no} t={self.clock.now_s - 1000:.2f} {line}")

    def describe(self) -> str:
        lines = [f"seed {self.seed}, round {self.round_no}, faults {self.faults}, "
                 f"journal_entries_max {self.journal_entries_max}, fetch_entries_max "
                 f"{self.fetch_entries_max}", f"stats {self.stats}"]
        for broker in self.brokers.values():
            if not broker.up:
                lines.append(f"  broker {broker.node_id}: down until r{broker.down_until}")
                continue
            state, journal = broker.node.state, broker.node.journal
            lines.append(f"  broker {broker.node_id}: {state.role.value} epoch {state.epoch} "
                         f"leader {state.leader_id} journal {journal.start}..{journal.end} "
                         f"commit {state.commit} paused until r{broker.paused_until} "
                         f"topics {self._topics_of(broker)}")
        lines.append("last events:")
        lines.extend(f"  {line}" for line in self.events)
        return "\n".join(lines)

    def running(self, broker: Broker) -> bool:
        return broker.up and self.round_no >= broker.paused_until

    def reaches(self, sender: int, to: int) -> bool:
        """Whether a message from `sender` reaches a running `to` (no cut)."""
        target = self.brokers[to]
        return (self.running(target) and sender not in self.cut and to not in self.cut)

    def leader(self) -> Broker | None:
        """The running leader of the highest epoch, if any."""
        leaders = [broker for broker in self.brokers.values() if self.running(broker)
                   and broker.node.state.role is raft.Role.LEADER]
        if not leaders:
            return None
        best = max(leaders, key=lambda broker: broker.node.state.epoch)
        top = max(broker.node.state.epoch for broker in self.brokers.values() if broker.up)
        return best if best.node.state.epoch == top else None

    def _topics_of(self, broker: Broker) -> dict[str, int]:
        return {name: count for name, count in broker.log.topics().items()
                if not is_internal(name)}

    # -- the driver --------------------------------------------------------------------------

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.round()

    def round(self) -> None:
        self.round_no += 1
        self.stats.rounds += 1
        self.clock.now_s += ROUND_S
        for broker in self.brokers.values():
            if broker.up and broker.paused_until == self.round_no:
                self._thawing(broker)
        self._maybe_fault()
        brokers = [broker for broker in self.brokers.values() if self.running(broker)]
        self.rng.shuffle(brokers)
        for broker in brokers:
            self._loop_round(broker)
        self._serve_fetches()
        if self.workload:
            self._maybe_write()
        self._check_round()
        self._settle_writes()

    def heal(self) -> None:
        """Faults stop: the network heals, paused brokers thaw, down brokers come back;
        the workload stops (answers still come in)."""
        self.faults = dataclasses.replace(CALM)
        self.workload = False
        self.cut.clear()
        for broker in self.brokers.values():
            if self.round_no < broker.paused_until:
                self.thaw(broker.node_id)
            if not broker.up:
                broker.down_until = 0
                broker.open()
                self.event(f"broker {broker.node_id} reopened (heal)")
        self.event("healed")

    # -- faults ------------------------------------------------------------------------------

    def _faulted(self) -> set[int]:
        return ({b.node_id for b in self.brokers.values()
                 if not self.running(b)} | self.cut)

    def _maybe_fault(self) -> None:
        faults, rng = self.faults, self.rng
        for broker in self.brokers.values():
            if not broker.up and self.round_no >= broker.down_until:
                broker.open()
                self.event(f"broker {broker.node_id} reopened on its directory (life "
                           f"{broker.life})")
        if self.cut and self.round_no >= self.cut_until:
            self.event(f"partition of {sorted(self.cut)} healed")
            self.cut.clear()
        budget = (len(self.ids) - 1) // 2 - len(self._faulted())
        if budget <= 0:
            return
        healthy = [b for b in self.brokers.values() if b.node_id not in self._faulted()]
        if faults.partition and rng.random() < faults.partition and not self.cut:
            victim = rng.choice(healthy)
            self.cut = {victim.node_id}
            self.cut_until = self.round_no + rng.randint(1, faults.partition_rounds_max)
            self.stats.partitions += 1
            self.event(f"broker {victim.node_id} cut off until r{self.cut_until}")
        elif faults.pause and rng.random() < faults.pause:
            self.pause(rng.choice(healthy).node_id, rng.randint(1, faults.pause_rounds_max))
        elif faults.restart and rng.random() < faults.restart:
            victim = rng.choice(healthy)
            self.restart(victim.node_id, rng.randint(0, faults.down_rounds_max))

    def restart(self, node_id: int, down_rounds: int = 0) -> None:
        broker = self.brokers[node_id]
        self._settle_writes(broker_gone=node_id)
        broker.close()
        self.stats.restarts += 1
        broker.down_until = self.round_no + down_rounds
        self.event(f"broker {node_id} stopped, down until r{broker.down_until}")
        if down_rounds == 0:
            broker.open()

    def pause(self, node_id: int, rounds: int) -> None:
        """SIGSTOP the broker for `rounds`: not stepped, answers nothing."""
        broker = self.brokers[node_id]
        broker.paused_until = self.round_no + rounds
        broker.recreates_at_pause = self.stats.recreates
        self.stats.pauses += 1
        self.event(f"broker {node_id} paused until r{broker.paused_until}")

    def thaw(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        if self.round_no < broker.paused_until:
            broker.paused_until = self.round_no
        self._thawing(broker)

    def _thawing(self, broker: Broker) -> None:
        if self.stats.recreates > broker.recreates_at_pause:
            self.stats.paused_across_recreates += 1
        broker.recreates_at_pause = self.stats.recreates
        self.event(f"broker {broker.node_id} thawed")

    # -- one broker's loop round (node.py's _one_round, the network played here) --------------

    def _loop_round(self, broker: Broker) -> None:
        node = broker.node
        try:
            if broker.flight is not None:
                # The fetch of the last round: node.py's loop reads its answer (or gives up
                # on it) before it ticks again.
                self._await_answer(broker, broker.flight)
            node.tick()
            node._maybe_compact()
            while node._votes_to_send:
                self._vote_round(broker, node._votes_to_send.pop(0))
            node._settle_offsets()
            if node.state.role is raft.Role.LEADER:
                broker.flight = None  # elected by its own vote round: it fetches no more
                node.sync_appended()
                return
            if broker.flight is None or self._await_answer(broker, broker.flight):
                self._send_fetch(broker)
        except KaskaError as exc:
            # node.py's loop logs such a round and goes on with the next.
            self.stats.round_errors += 1
            self.event(f"broker {broker.node_id}: round failed: {exc!r}")

    def _vote_round(self, broker: Broker, request: raft.SendVotes) -> None:
        wire = WireVoteRequest(broker.node_id, request.epoch, request.last_epoch, request.end,
                               request.pre_vote, request.transfer)
        for peer in sorted(request.to):
            if not self.reaches(broker.node_id, peer) or self.rng.random() < self.faults.drop:
                continue
            answer = self.brokers[peer].node.answer_vote(wire)
            if not broker.node._absorb_vote(peer, done((0, answer.encode())), request):
                break
        state = broker.node.state
        if state.role is raft.Role.LEADER:
            self.stats.elections += 1
            self.event(f"broker {broker.node_id} leads epoch {state.epoch} (journal end "
                       f"{broker.node.journal.end})")

    def _await_answer(self, broker: Broker, flight: Flight) -> bool:
        """Absorb the answer if it is in, or give up on it as node.py's `_await_fetch_answer`
        does (the epoch or the leader moved, the election timeout or the request timeout
        passed). False while still waiting; True once the follower may fetch again."""
        node, now = broker.node, self.clock.now_s
        arrived = flight.answer is not None and flight.answer_round <= self.round_no
        if not arrived:
            state = node.state
            moved = state.epoch != flight.request.epoch or raft.fetch_target(state) not in (
                None, flight.target)
            silent = state.role is raft.Role.FOLLOWER and now >= state.election_deadline_s
            if not (moved or silent or now - flight.sent_s >= node.config.request_timeout_s):
                return False
            self.stats.abandoned_fetches += 1
            broker.drop_connection(flight.target)
            broker.flight = None
            return True
        broker.flight = None
        response = ReplicaFetchResponse.decode(flight.answer)
        node._absorb_fetch(flight.target, response, flight.request.fetch_end)
        return True

    def _send_fetch(self, broker: Broker) -> None:
        node = broker.node
        node.sync_appended()
        state = node.state
        leader = raft.fetch_target(state)
        target = leader if leader is not None else node._round_robin_peer()
        config = node.config
        request = ReplicaFetchRequest(broker.node_id, state.epoch, state.log.end,
                                      state.log.last_epoch, config.fetch_bytes_max,
                                      config.fetch_wait_ms if leader is not None else 0)
        target_broker = self.brokers[target]
        flight = Flight(target, target_broker.life, request, self.clock.now_s,
                        self.round_no + self.rng.randint(0, self.faults.delay_rounds_max))
        if self._lost(broker.node_id, target):
            flight.lost = True
        broker.flight = flight

    def _lost(self, sender: int, to: int) -> bool:
        if sender in self.cut or to in self.cut:
            return True
        if self.faults.drop and self.rng.random() < self.faults.drop:
            self.stats.drops += 1
            return True
        return False

    # -- the leaders' side ---------------------------------------------------------------------

    def _serve_fetches(self) -> None:
        followers = [broker for broker in self.brokers.values() if broker.flight is not None]
        self.rng.shuffle(followers)
        for follower in followers:
            flight = follower.flight
            if flight.lost or flight.answer is not None or flight.arrives_round > self.round_no:
                continue
            target = self.brokers[flight.target]
            if not target.up or target.life != flight.target_life:
                flight.lost = True  # the connection died with the process
                continue
            if not self.running(target):
                continue  # paused: the request waits in its socket
            if self._long_poll(target, flight):
                continue
            self._answer(follower, target, flight)

    def _long_poll(self, leader: Broker, flight: Flight) -> bool:
        """node.py's answer_fetch waits while the follower holds the whole journal: held here
        until the journal grows, the leadership changes or max_wait_ms passed."""
        request, state = flight.request, leader.node.state
        if not request.max_wait_ms or state.role is not raft.Role.LEADER \
                or state.epoch != request.epoch \
                or leader.node.journal.end > request.fetch_end \
                or state.transfer_to == request.follower:
            return False
        if flight.held_until_s is None:
            flight.held_until_s = self.clock.now_s + request.max_wait_ms / 1000
            self.stats.long_polls += 1
        return self.clock.now_s < flight.held_until_s

    def _answer(self, follower: Broker, leader: Broker, flight: Flight) -> None:
        request = dataclasses.replace(flight.request, max_wait_ms=0)  # held above instead
        node = leader.node
        if self.idle_watch:
            self._watch_idle(follower, leader, request)
        try:
            response, slices = replica_fetch.replica_fetch_answer(
                node, leader.log, request, None, follower.session(leader.node_id, leader.life))
        except KaskaError as exc:
            self.event(f"broker {leader.node_id} refused the fetch of {follower.node_id} at "
                       f"{request.fetch_end}: {exc!r}")
            raise HandlerFailure(f"REPLICA_FETCH of broker {follower.node_id} at "
                                 f"{request.fetch_end} failed on leader {leader.node_id}: "
                                 f"{exc!r}\n{self.describe()}") from exc
        data = read_slices(slices)
        self.stats.answers += 1
        if response.outcome is FetchOutcome.SNAPSHOT:
            self.stats.snapshot_answers += 1
        self._check_served(leader, response, data)
        self._watch_progress(follower, leader, request, response)
        flight.answer = response.encode_prefix() + data
        flight.answer_round = self.round_no + self.rng.randint(0, self.faults.delay_rounds_max)
        if self._lost(leader.node_id, follower.node_id):
            flight.answer, flight.lost = None, True

    def _watch_progress(self, follower: Broker, leader: Broker, request: ReplicaFetchRequest,
                        response: ReplicaFetchResponse) -> None:
        """No spin: a follower behind the leader is answered something that moves it on. An
        empty ENTRIES answer never does; a SNAPSHOT answer again at the same journal end means
        the last install failed, which only a lost SNAPSHOT_FETCH excuses (not once calm)."""
        end = leader.node.journal.end
        behind = request.fetch_end < end and leader.node.state.role is raft.Role.LEADER
        empty = response.outcome is FetchOutcome.ENTRIES and not response.entries
        again = response.outcome is FetchOutcome.SNAPSHOT \
            and request.fetch_end == follower.last_fetch_end and not self.faults.drop
        follower.last_fetch_end = request.fetch_end
        if not (behind and (empty or again)):
            follower.behind_empty = 0
            return
        follower.behind_empty += 1
        self.event(f"broker {leader.node_id} answered {follower.node_id} at "
                   f"{request.fetch_end} {'nothing' if empty else 'SNAPSHOT again'} (journal "
                   f"end {end}); {follower.behind_empty} in a row")
        if follower.behind_empty > SPIN_ANSWERS_MAX:
            raise SpinFailure(f"broker {follower.node_id} fetched at {request.fetch_end} behind "
                              f"leader {leader.node_id}'s end {end} and got "
                              f"{follower.behind_empty} answers in a row that did not move it "
                              f"on\n{self.describe()}")

    def _check_served(self, leader: Broker, response: ReplicaFetchResponse,
                      data: bytes) -> None:
        """Every batch served is the batch its entry was written with."""
        response = dataclasses.replace(response, data=data)
        for header, view in response.batches():
            self.stats.entries_served += 1
            if header.kind is EntryKind.SKIPPED:
                self.stats.skipped_served += 1
            if not header.data_bytes:
                continue
            written = self.written.get((header.index, header.epoch))
            served = tuple(value for _, value in records(bytes(view)))
            if written is not None and served != written:
                raise SafetyViolation(
                    f"leader {leader.node_id} served entry {header.index} (epoch "
                    f"{header.epoch}, {header.topic}/{header.partition}@{header.base_offset}) "
                    f"with another batch's bytes: {served[:2]} instead of {written[:2]}\n"
                    f"{self.describe()}")

    def _watch_idle(self, follower: Broker, leader: Broker,
                    request: ReplicaFetchRequest) -> None:
        follower.idle_answers += 1
        if request.fetch_end != leader.node.journal.end:
            raise SpinFailure(f"idle: broker {follower.node_id} fetched at "
                              f"{request.fetch_end}, leader {leader.node_id}'s journal ends "
                              f"at {leader.node.journal.end}\n{self.describe()}")

    # -- the workload ----------------------------------------------------------------------------

    def _maybe_write(self) -> None:
        leader = self.leader()
        if leader is None:
            return
        faults, rng = self.faults, self.rng
        topics = self._topics_of(leader)
        deleting = set(leader.manager.pending_deletes())
        present = [name for name in sorted(topics) if name not in deleting]
        absent = [name for name in TOPIC_NAMES if name not in topics]
        if rng.random() < faults.produce and present:
            name = rng.choice(present)
            self.produce(leader, name, rng.randrange(topics[name]), rng.randint(1, 3))
        if rng.random() < faults.create and absent:
            self.create(leader, rng.choice(absent), rng.randint(1, PARTITIONS_MAX))
        elif rng.random() < faults.delete and present:
            self.delete(leader, rng.choice(present))

    def produce(self, leader: Broker, topic: str, partition: int, count: int = 1) -> bool:
        """An idempotent acks=all produce at `leader`; False when refused at once."""
        node, manager = leader.node, leader.manager
        topic_id = node.journal.incarnation(topic)
        producer = self.producers.setdefault((topic, topic_id, partition), Producer())
        if producer.busy:
            return False
        if producer.retry is not None:
            sequence, values = producer.retry
        else:
            self.serial += 1
            sequence = producer.next_sequence
            values = tagged_values(topic, topic_id, partition, self.serial, count,
                                   self.pad_bytes)
        data = batch(*values, producer_id=producer.producer_id, sequence=sequence)

        def fill(region: memoryview) -> None:
            region[:] = data

        try:
            result, await_acks = manager.partition(topic, partition).append_deferred(
                len(data), fill, ACKS_ALL)
        except (NotLeaderError, UnknownTopicOrPartitionError) as exc:
            producer.retry = (sequence, values)
            self.event(f"produce {topic}/{partition} seq {sequence} at {leader.node_id} "
                       f"refused: {type(exc).__name__}")
            return False
        except (OutOfOrderSequenceError, DuplicateSequenceError) as exc:
            # A client starts a new producer; its unacknowledged batch is not retried.
            self.event(f"produce {topic}/{partition} seq {sequence}: {exc!r}; new producer")
            self.producers[(topic, topic_id, partition)] = Producer()
            return False
        producer.retry = None
        if sequence == producer.next_sequence:
            producer.next_sequence += 1
        entry = node.journal.find_batch(topic, partition, result.base_offset)
        if entry is None:
            if not (result.duplicate and node.journal.compacted_batch(
                    topic, partition, result.base_offset)):
                raise SafetyViolation(f"{topic}/{partition}@{result.base_offset} appended at "
                                      f"{leader.node_id} has no journal entry")
            await_acks()  # a retry of a batch compacted since: committed long ago
            self._acked(Pending("produce", leader.node_id, leader.life, self.round_no, None,
                                node.state.epoch, topic, await_acks, producer, partition,
                                sequence, values, topic_id))
            return True
        if not result.duplicate:
            self.written[(entry.index, entry.epoch)] = values
        self.stats.produces += 1
        producer.busy = True
        self.pending.append(Pending("produce", leader.node_id, leader.life, self.round_no,
                                    entry, node.state.epoch, topic, await_acks, producer,
                                    partition, sequence, values, topic_id))
        self.event(f"produce {topic}{tuple(topic_id)}/{partition} seq {sequence} at "
                   f"{leader.node_id}: entry {entry.index}@{entry.epoch} offset "
                   f"{result.base_offset}{' (duplicate)' if result.duplicate else ''}")
        return True

    def create(self, leader: Broker, topic: str, partitions: int) -> bool:
        manager = leader.manager
        try:
            entry, epoch = manager.journal_create(topic, partitions)
        except (NotLeaderError, TopicAlreadyExistsError) as exc:
            self.event(f"create {topic} at {leader.node_id} refused: {type(exc).__name__}")
            return False
        topic_id = TopicId(entry.epoch, entry.index)
        self.pending.append(Pending(
            "create", leader.node_id, leader.life, self.round_no, entry, epoch, topic,
            lambda: manager.await_entry(entry, epoch, topic), topic_id=topic_id))
        self.event(f"create {topic}{tuple(topic_id)} ({partitions} partitions) at "
                   f"{leader.node_id}")
        return True

    def delete(self, leader: Broker, topic: str) -> bool:
        """A delete decided as the DeleteTopic handler's (`delete_topic`) decides it: only an
        incarnation live after the leader's whole journal, uncommitted tail included, gets a
        DELETE_TOPIC entry (a leader whose commit lags may still hold a deleted one on disk)."""
        manager = leader.manager
        if not live_after_journal(leader.node.journal, topic):
            self.event(f"delete {topic} at {leader.node_id}: deleted in its journal already")
            return False
        topic_id = leader.node.journal.incarnation(topic)
        try:
            entry = manager.journal_delete(topic)
        except NotLeaderError as exc:
            self.event(f"delete {topic} at {leader.node_id} refused: {type(exc).__name__}")
            return False
        epoch = leader.node.state.epoch

        def settle() -> None:
            try:
                manager.await_entry(entry, epoch, topic)
            finally:
                manager.forget_delete(topic)

        self.pending.append(Pending("delete", leader.node_id, leader.life, self.round_no,
                                    entry, epoch, topic, settle, topic_id=topic_id))
        self.event(f"delete {topic}{tuple(topic_id) if topic_id else ''} at "
                   f"{leader.node_id}: entry {entry.index}@{entry.epoch}")
        return True

    def _settle_writes(self, broker_gone: int | None = None) -> None:
        """Answer the writes whose entry is committed, or whose leader moved on or stops."""
        waiting = []
        for pending in self.pending:
            broker = self.brokers[pending.broker]
            if broker.life != pending.life or not broker.up:
                self._not_acked(pending, "its broker restarted")
                continue
            node = broker.node
            committed = node.entry_committed(pending.entry.index, pending.entry.epoch)
            leads = node.state.role is raft.Role.LEADER and node.state.epoch == pending.epoch
            if broker_gone == pending.broker:
                self._not_acked(pending, "its broker stops")  # the answer dies with it
                continue
            if self.running(broker) and (committed or not leads
                                         or self.round_no - pending.since_round
                                         > ACK_TIMEOUT_ROUNDS):
                try:
                    pending.settle()
                except (NotLeaderError, NotEnoughReplicasError) as exc:
                    self._not_acked(pending, type(exc).__name__)
                    continue
                self._acked(pending)
                continue
            waiting.append(pending)
        self.pending = waiting

    def _not_acked(self, pending: Pending, why: str) -> None:
        if pending.producer is not None:
            pending.producer.busy = False
            pending.producer.retry = (pending.sequence, pending.values)
        if pending.kind == "delete":
            broker = self.brokers[pending.broker]
            if broker.up and broker.life == pending.life:
                broker.manager.forget_delete(pending.topic)
        self.event(f"{pending.kind} {pending.topic} entry {pending.entry.index}@"
                   f"{pending.entry.epoch} not acknowledged: {why}")

    def _acked(self, pending: Pending) -> None:
        entry = pending.entry
        if entry is None:
            pending.producer.busy = False
            self.stats.acks += 1
            self.acked_batches.append(pending)
            self.event(f"produce {pending.topic} seq {pending.sequence}: a retry of a "
                       "compacted batch, acknowledged")
            return
        if self.committed.get(entry.index, (None,))[0] != entry.epoch:
            raise SafetyViolation(f"{pending.kind} {pending.topic} acknowledged by entry "
                                  f"{entry.index}@{entry.epoch}, committed there: "
                                  f"{self.committed.get(entry.index)}\n{self.describe()}")
        if pending.kind == "produce":
            pending.producer.busy = False
            self.stats.acks += 1
            self.acked_batches.append(pending)
        elif pending.kind == "create":
            self.stats.creates += 1
            if pending.topic in self.ever_created:
                self.stats.recreates += 1
            self.ever_created.add(pending.topic)
            self.acked_creates.append((pending.topic, pending.topic_id))
        else:
            self.stats.deletes += 1
            self.acked_deletes.append((pending.topic, pending.topic_id))
        self.event(f"{pending.kind} {pending.topic} entry {entry.index}@{entry.epoch} "
                   "acknowledged")

    # -- checks --------------------------------------------------------------------------------

    def _check_round(self) -> None:
        for broker in self.brokers.values():
            if not broker.up:
                continue
            node = broker.node
            state = node.state
            if state.role is raft.Role.LEADER:
                leader = self.leader_of_epoch.setdefault(state.epoch, broker.node_id)
                if leader != broker.node_id:
                    raise SafetyViolation(f"two leaders in epoch {state.epoch}: {leader} and "
                                          f"{broker.node_id}\n{self.describe()}")
            self._observe_commit(broker)

    def _observe_commit(self, broker: Broker) -> None:
        """State machine safety for the committed entries this broker holds."""
        journal, commit = broker.node.journal, broker.node.state.commit
        for index in range(max(broker.seen_commit, journal.start), commit):
            key = entry_key(journal.entry(index))
            first = self.committed.setdefault(index, key)
            if first != key:
                raise SafetyViolation(f"broker {broker.node_id} commits {key} at {index}, "
                                      f"where {first} was committed\n{self.describe()}")
        broker.seen_commit = max(broker.seen_commit, commit)

    def converged(self) -> Broker | None:
        """The leader, once every replica equals it (journal, commit, topics, bytes)."""
        leader = self.leader()
        if leader is None or self.pending or not leader.node.holds_lease():
            return None
        end, commit = leader.node.journal.end, leader.node.state.commit
        if commit != end:
            return None
        for broker in self.brokers.values():
            if not self.running(broker):
                return None
            state = broker.node.state
            if (broker.node.journal.end, state.commit) != (end, commit):
                return None
        for broker in self.brokers.values():
            if self._replica_differs(leader, broker) is not None:
                return None
        return leader

    def _replica_differs(self, leader: Broker, broker: Broker) -> str | None:
        topics = self._topics_of(leader)
        if self._topics_of(broker) != topics:
            return f"topics {self._topics_of(broker)}, leader {topics}"
        for name, count in topics.items():
            if broker.node.journal.incarnation(name) != leader.node.journal.incarnation(name):
                return (f"{name} is incarnation {broker.node.journal.incarnation(name)}, "
                        f"leader {leader.node.journal.incarnation(name)}")
            for number in range(count):
                mine = broker.log.partition(name, number)
                theirs = leader.log.partition(name, number)
                if (mine.log_start_offset, mine.log_end_offset) != (
                        theirs.log_start_offset, theirs.log_end_offset):
                    return (f"{name}/{number} holds {mine.log_start_offset}.."
                            f"{mine.log_end_offset}, leader {theirs.log_start_offset}.."
                            f"{theirs.log_end_offset}")
                if mine.read_bytes(0, READ_ALL_BYTES) != theirs.read_bytes(0, READ_ALL_BYTES):
                    return f"{name}/{number}: bytes differ from the leader's"
        return None

    def converge(self, rounds_max: int) -> int:
        """After `heal`: rounds until every replica equals the leader; LivenessFailure past
        `rounds_max`. Returns the rounds it took."""
        for taken in range(rounds_max + 1):
            if self.converged() is not None:
                self.event(f"converged after {taken} rounds")
                return taken
            self.round()
        leader = self.leader()
        reasons = []
        if leader is not None:
            for broker in self.brokers.values():
                if broker.up:
                    differs = self._replica_differs(leader, broker)
                    reasons.append(f"broker {broker.node_id}: journal end "
                                   f"{broker.node.journal.end} (leader "
                                   f"{leader.node.journal.end}); {differs or 'same bytes'}")
        raise LivenessFailure(f"no convergence {rounds_max} rounds after healing: "
                              f"{'; '.join(reasons) or 'no leader'}\n{self.describe()}")

    def check_history(self) -> dict[str, int]:
        """On a converged cluster: every acknowledged write is in its own incarnation, unless a
        committed delete removed that incarnation; each record once, in its own incarnation.
        Returns the records checked per kind."""
        leader = self.converged()
        assert leader is not None, "check_history runs on a converged cluster"
        current = {name: leader.node.journal.incarnation(name)
                   for name in self._topics_of(leader)}
        deleted = {key[7] for key in self.committed.values()
                   if key[1] is EntryKind.DELETE_TOPIC}
        for name, topic_id in self.acked_creates:
            if current.get(name) != topic_id and topic_id not in deleted:
                raise SafetyViolation(f"acknowledged create of {name}{tuple(topic_id)} is "
                                      f"gone, and no committed delete names it\n"
                                      f"{self.describe()}")
        for name, topic_id in self.acked_deletes:
            if topic_id is not None and current.get(name) == topic_id:
                raise SafetyViolation(f"acknowledged delete of {name}{tuple(topic_id)}, "
                                      f"which is still there\n{self.describe()}")
        held: dict[tuple[str, int], list[bytes]] = {}
        for name, count in self._topics_of(leader).items():
            for number in range(count):
                values = [value for _, value in records(
                    leader.log.partition(name, number).read_bytes(0, READ_ALL_BYTES))]
                for value in values:
                    owner = incarnation_of_value(value)
                    if owner != (name, current[name], number):
                        raise SafetyViolation(f"{name}{tuple(current[name])}/{number} holds a "
                                              f"record of {owner}: {value!r}\n"
                                              f"{self.describe()}")
                if len(set(values)) != len(values):
                    raise SafetyViolation(f"{name}/{number} holds a record twice\n"
                                          f"{self.describe()}")
                held[(name, number)] = values
        checked = 0
        for pending in self.acked_batches:
            if current.get(pending.topic) != pending.topic_id:
                if pending.topic_id not in deleted:
                    raise SafetyViolation(f"acknowledged batch of {pending.topic}"
                                          f"{tuple(pending.topic_id)} lost with its topic, "
                                          f"which no committed delete names\n"
                                          f"{self.describe()}")
                continue
            values = set(held.get((pending.topic, pending.partition), ()))
            missing = [value for value in pending.values if value not in values]
            if missing:
                raise SafetyViolation(f"acknowledged records missing from {pending.topic}/"
                                      f"{pending.partition}: {missing[:3]}\n{self.describe()}")
            checked += len(pending.values)
        return {"acknowledged_records": checked,
                "records_held": sum(len(values) for values in held.values())}

    def check_idle(self, rounds: int) -> dict[int, int]:
        """A converged cluster, left alone: every follower fetches only at the leader's
        journal end (long-polls) and is answered at most once per long-poll. Returns the
        answers per follower."""
        leader = self.converged()
        assert leader is not None, "check_idle runs on a converged cluster"
        epoch, end = leader.node.state.epoch, leader.node.journal.end
        for broker in self.brokers.values():
            broker.idle_answers = 0
        self.idle_watch = True
        try:
            self.run(rounds)
        finally:
            self.idle_watch = False
        if (leader.node.state.epoch, leader.node.journal.end) != (epoch, end) \
                or self.leader() is not leader:
            raise SpinFailure(f"idle cluster changed: leader {leader.node_id} epoch {epoch} "
                              f"end {end} -> {self.describe()}")
        wait_s = leader.node.config.fetch_wait_ms / 1000
        answers_max = int(rounds * ROUND_S / wait_s) + 2
        answers = {broker.node_id: broker.idle_answers for broker in self.brokers.values()
                   if broker is not leader}
        for node_id, count in answers.items():
            if count > answers_max:
                raise SpinFailure(f"idle: broker {node_id} was answered {count} times in "
                                  f"{rounds * ROUND_S:.1f} s (at most {answers_max} long-polls)"
                                  f"\n{self.describe()}")
            if count == 0:
                raise SpinFailure(f"idle: broker {node_id} did not fetch at all "
                                  f"(a follower heartbeats by fetching)\n{self.describe()}")
        return answers

    def settle_stats(self) -> Stats:
        """Stats including the live nodes' counters."""
        total = dataclasses.replace(self.stats)
        for broker in self.brokers.values():
            if broker.up:
                total.installs += broker.node.counters.snapshots_installed
                total.compactions += broker.node.counters.compactions
        return total
