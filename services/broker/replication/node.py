"""ReplicationNode: the edge around the pure state machine of `raft.py`.

It owns the journal, the persisted quorum state and commit index, and the replication loop
thread; it carries out the state machine's actions (persist, send votes, append the NOOP,
apply fetched entries, truncate, apply commits) and answers the peers' VOTE and REPLICA_FETCH
requests. `replica_manager.py` puts the leader's side (produce, topics) on top of it.

This module keeps the node's lifecycle, its lock and state, the step of the state machine and
the carrying out of its actions, and the replication loop (ticks, vote rounds, compaction, the
order of a round). Two mixins hold the node's two sides, on the node's state:
- leader_answers.py (`LeaderAnswers`): the answers to the peers' VOTE, REPLICA_FETCH and
  SNAPSHOT_FETCH requests;
- follower_fetch.py (`FollowerFetching`): the loop's fetches from the leader, applying or
  truncating what they bring, and the install of the leader's snapshot.
The parts that need none of the node's state live beside it, each taking what it needs:
- config.py: ReplicationConfig, the fsync policy, the counters;
- bootstrap.py: opening the data directory's replication state (cluster id, identity,
  adoption of pre-replication data, reconcile);
- peer_requests.py: the loop's connections to its peers (send, judge an answer, drop);
- fetch_answers.py: the leader's choice of entries, its refusals, its SNAPSHOT_FETCH answer;
- entry_effects.py: what entries do to the Log (apply, truncate, a committed delete, fsync);
- commit_apply.py: the high watermarks and the applied index;
- snapshot_install.py: a follower's topics and partition copies of an install.

Threads:
- the replication loop (`_run`): ticks, runs pre-votes and elections (vote requests to every
  peer in parallel), fetches from the leader and applies what comes back. Only this thread
  applies entries or truncates, so a follower's journal and partitions change in one order.
- request threads: `answer_vote`, `answer_fetch` (the leader's side of replication), and the
  leader's appends (`replica_manager.py`).
- the commit saver (`_commit_saver`, common/periodic.py): every `commit_persist_interval_s` it
  saves the commit and applied indexes (`save_commit_if_due`: four fsyncs). Not on the loop:
  under a write load an fsync waits for the file system's journal, which writes out every dirty
  page of the partitions first (ext4's ordered mode), and a follower's loop stalled in it for
  0.1-0.26 s between two fetches, so its confirmations of the leader's answers came too late
  for the leader lease.

Locks, always taken in this order: `_lock` (the state machine, the high watermarks, commits
applied) → a partition's lock → the journal's lock. Network waits never hold `_lock`.
`_changed` (a condition on `_lock`) wakes long-polling replica fetches when the journal grows
and produce requests waiting for their high watermark when a commit or role change happens.

Full disk (StorageFullError, counted and logged once per episode by the Log's DiskSpace): a
step's writes -- the vote or epoch (`PersistQuorum`), a new leader's NOOP -- are made before the
step's state is adopted, so a refused write leaves the node as it was (it never answers or
leads on a vote or a leadership its disk does not hold) and the step is simply taken again
later. A follower whose apply is refused keeps what it applied so far (each entry whole) and
fetches again after `storage_full_pause_s`: it stays behind and catches up once there is room.
The commit index is persisted when there is room (it is only a lower bound).

Fsync policy (`ReplicationConfig.fsync`, docs/replication.md "Durability"): with `none`
(Kafka's) an entry counts as held once it is in the page cache; with `entry` (Raft's and
Redpanda's) only once this broker fsynced the journal and the partition bytes its entries
describe (`sync_appended`): a follower syncs before the REPLICA_FETCH whose fetch_end
acknowledges them, a leader before its own copy counts toward the majority (the state
machine's `synced_end`). The fsyncs are grouped: one per fetch round on a follower; on a leader
one per group of produces waiting for acks (the first waiter syncs everything appended so far,
the others find their entry covered) and one per loop round for the rest (acks=1, the NOOP).
They run outside `_lock` (votes and fetches are answered meanwhile) under `_sync_lock`.

Identity (identity.py; docs/replication.md): the data directory's cluster id is checked against
the configured one before anything else is read (`ClusterIdMismatchError`: the broker refuses
to start). A directory made now, in a cluster, holds a new broker incarnation and starts as a
learner: it may be a broker that lost its state. While a learner, the loop also asks every
voter it has not heard from yet (a REPLICA_FETCH that does not wait), since its promotion needs
every voter's epoch; the promotion (`BecomeVoter`) is persisted before the state that votes.

Compaction (docs/replication.md "Compaction"): once the journal holds more
than `journal_entries_max` entries or `journal_bytes_max` bytes of records, the loop folds the
applied prefix into the journal's snapshot (`_maybe_compact`), after syncing the partition
bytes it covers. A leader keeps the entries of a follower that lags by less than half the
bound; one further behind gets a SNAPSHOT answer and installs it (`_install_snapshot`): it
makes its topics the snapshot's, copies the partition bytes the snapshot covers with
SNAPSHOT_FETCH (network waits outside `_lock`; only the loop thread changes a follower's
partitions), syncs them, then replaces its journal with the snapshot.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, as_completed
from pathlib import Path

from common.kaska.errors import KaskaError
from common.kaska.protocol.metadata import NO_LEADER
from common.liveness import Liveness
from common.periodic import PeriodicThread
from services.broker.replication import raft
from services.broker.replication.bootstrap import open_replication_state
from services.broker.replication.commit_apply import CommitApplier
from services.broker.replication.config import (  # noqa: F401 (node.py's names, re-exported)
    REPLICATION_DIR,
    PeerAddress,
    ReplicationConfig,
    ReplicationCounters,
    ReplicationFsync,
    ReplicationFsyncError,
)
from services.broker.replication.entry_effects import EntryEffects
from services.broker.replication.errors import SyncFailedError
from services.broker.replication.fetch_answers import FetchSession
from services.broker.replication.follower_fetch import FollowerFetching
from services.broker.replication.follower_progress import FollowerProgress
from services.broker.replication.identity import BrokerIdentity
from services.broker.replication.leader_answers import LeaderAnswers
from services.broker.replication.peer_link import PeerSigner
from services.broker.replication.peer_requests import PeerRequests
from services.broker.replication.quorum_store import QuorumState
from services.broker.replication.wire.replica_fetch import (
    EntryKind,
)
from services.broker.replication.wire.vote import VoteRequest as WireVoteRequest
from services.broker.replication.wire.vote import VoteResponse as WireVoteResponse
from services.broker.storage.errors import StorageFullError
from services.broker.storage.log import Log

log = logging.getLogger(__name__)

# Actions whose writes a step's new state presupposes (see _step_locked).
_WRITES_FIRST = (raft.PersistQuorum, raft.AppendNoop, raft.BecomeVoter)


class ReplicationNode(LeaderAnswers, FollowerFetching):
    def __init__(self, config: ReplicationConfig, log_store: Log, data_dir: Path, *,
                 on_offsets_batch: Callable[[bytes], None] | None = None,
                 on_offsets_truncated: Callable[[], None] | None = None,
                 on_topic_deleted: Callable[[str], None] | None = None,
                 on_partition_visible: Callable[[str, int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None,
                 peer_signer: PeerSigner | None = None) -> None:
        """`peer_signer` signs the frames sent to the peers (peer_link.py); a node with peers
        needs one once started."""
        self.config = config
        # How logs name this node: "broker N" for group 0 (the lines tools and tests read),
        # "broker N group G" for a data group.
        self.name = f"broker {config.node_id}" + (f" group {config.group}" if config.group
                                                  else "")
        self._signer = peer_signer
        self.raft_config = config.raft_config()
        self._log = log_store
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_offsets_batch = on_offsets_batch or (lambda _batch: None)
        self._on_offsets_truncated = on_offsets_truncated or (lambda: None)
        self._on_topic_deleted = on_topic_deleted or (lambda _topic: None)
        self._on_partition_visible = on_partition_visible or (lambda _t, _p: None)
        self._peers = {peer.node_id: peer for peer in config.peers}
        self.counters = ReplicationCounters()
        self.follower_progress = FollowerProgress()
        opened = open_replication_state(config, log_store, data_dir)
        self._directory = opened.directory
        self._space = log_store.space
        self._identity_store = opened.identity_store
        self.journal = opened.journal
        self._quorum_store = opened.quorum_store
        self._commit_store = opened.commit_store
        self._applied_store = opened.applied_store
        quorum, self.identity = opened.quorum, opened.identity
        applied, commit = opened.applied, opened.commit
        self._effects = EntryEffects(config.node_id, self.journal, log_store,
                                     self._on_topic_deleted, self.counters)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._syncing = config.fsync is ReplicationFsync.ENTRY
        # Group fsyncs (sync_appended); lock order: _sync_lock → _lock, never held by _lock.
        self._sync_lock = threading.Lock()
        # The synced prefix: nothing at start, since a SIGKILL may have left what recovery
        # found in the page cache only (the first sync fsyncs it all). Its generation moves
        # with every truncation, so a sync that straddles one adopts nothing.
        self._synced_end = 0
        self._truncation_generation = 0
        self.syncs = 0  # sync_appended calls that fsynced (tests, logs)
        self._state = raft.initial_state(self.raft_config, quorum.epoch, quorum.voted_for,
                                         self._view(), commit, clock(), self._rng,
                                         synced_end=0 if self._syncing else None,
                                         learner=not self.identity.voter)
        if self._signer is not None:
            self._signer.identify(self.identity.cluster_id, self.identity.incarnation,
                                  self._state.learner)
        # The high watermarks and the applied index (commit_apply.py). The effects of the
        # entries below `effects_from` were done before this start (the saved applied index
        # says so). Not past the journal's end: entries reconcile cut come again from the
        # leader, and applying one of their deletes again is harmless (it names its
        # incarnation).
        self._commits = CommitApplier(
            self.journal, self._effects,
            effects_from=max(min(applied, self.journal.end), self.journal.start))
        with self._lock:
            # DeleteRecords folded into the snapshot: their entries are gone, their starts not.
            self._effects.enforce_log_starts(self.journal.snapshot)
            self._apply_commits_locked(commit)
        self._persisted_commit = commit
        self._persisted_at_s = clock()
        self._votes_to_send: list[raft.SendVotes] = []
        # Offsets-table work found under _lock, done after it is released: CommittedOffsets
        # holds its own lock while it appends through replication (which takes _lock).
        self._offsets_backlog: list[bytes] = []
        self._offsets_reload = False
        self._peer_requests = PeerRequests(config, self._peers, peer_signer)
        self._stop = threading.Event()
        self._direct_sessions: dict[int, FetchSession] = {}  # answer_fetch without a session
        # follower -> the commit index its last ENTRIES answer carried (answer_fetch's wait).
        self._commit_sent: dict[int, int] = {}
        thread_name = f"kaska-replication-{config.node_id}" + (
            f"-g{config.group}" if config.group else "")
        self._thread = threading.Thread(target=self._run, daemon=True, name=thread_name)
        # Touched each round: the broker's /healthz says 503 once a round hangs (a deadlock).
        self.liveness = Liveness(f"replication loop {thread_name}", clock)
        # Saving is a lower bound only: after a failed save (OSError) a restart starts from an
        # older commit, and the next interval tries again.
        self._commit_saver = PeriodicThread(
            f"{thread_name}-commits", config.commit_persist_interval_s, self.save_commit_if_due,
            stop=self._stop, errors=(OSError,), on_error=self._commit_save_failed)
        self._next_peer = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        # A cluster of one elects itself before the broker listens, so it serves at once.
        if not self._peers:
            try:
                self.tick()
            except StorageFullError:
                pass  # counted and logged; the loop elects it once its vote can be stored
        self._thread.start()
        self._commit_saver.start()

    def stop(self) -> None:
        """Stop the loop and close the journal: appends after this fail (and are discarded);
        produce requests waiting for acks wake up and answer a retriable error."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        for thread in (self._thread, self._commit_saver):
            if thread.is_alive():
                thread.join()
        self._peer_requests.close_all("broker stopping")
        with self._lock:
            due = self._commit_persist_due_locked(force=True)
        if due is not None:
            self._persist_commit(*due)
        self.journal.flush()
        self.journal.close()

    # -- what the rest of the broker asks --------------------------------------------------

    @property
    def state(self) -> raft.RaftState:
        return self._state

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the state machine's times are on (last fetches, deadlines)."""
        return self._clock

    def peer_address(self, node_id: int) -> str:
        peer = self._peers.get(node_id)
        return peer.address if peer is not None else ""

    def high_watermark(self, topic: str, partition: int) -> int:
        return self._commits.high_watermark(topic, partition)

    @property
    def applied(self) -> int:
        """Every committed entry below it has had its effects here (commit_apply.py); read
        under `_lock` (a `wait_changed` predicate) it includes the commit just published."""
        return self._commits.applied

    def entry_committed(self, index: int, epoch: int) -> bool:
        """Whether the committed prefix holds THE entry (index, epoch) -- not merely something
        at that index: an acknowledgement names the entry that was committed (Raft's log
        matching: one entry per (epoch, index)). Lock-free, so it can be a `wait_changed`
        predicate: an entry below the commit index never changes, and the commit index never
        goes back."""
        if self._state.commit <= index:
            return False
        # The epoch cache names compacted entries too; None: a wiped journal (a commit from an
        # older incarnation), not ours.
        return self.journal.epoch_of(index) == epoch

    def wait_changed(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until predicate() holds (checked on every commit, append or role change)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._stop.is_set() or predicate(),
                                          timeout_s) and predicate()

    def leader_appended(self) -> None:
        """The leader added journal entries: recount the commit, wake long-polls."""
        with self._lock:
            self._step_locked(raft.LogChanged(self._view()))
            self._changed.notify_all()

    @property
    def synced_end(self) -> int | None:
        """The end of the fsynced journal prefix (policy `entry`); None with policy `none`."""
        return self._synced_end if self._syncing else None

    def sync_appended(self, upto: int | None = None) -> None:
        """Policy `entry`: fsync the journal and the partition bytes of its entries up to at
        least `upto` (default: the journal's end now), then let the state machine count them
        as held (SyncFailedError when an fsync fails: nothing more counts). Nothing with
        policy `none`, nor when they are synced already. Grouped: callers
        queue on `_sync_lock`, and each sync covers everything appended before it started, so
        the waiters behind it usually find their entries covered and return at once."""
        if not self._syncing:
            return
        if upto is not None and self._synced_end >= upto:
            return
        with self._sync_lock:
            generation = self._truncation_generation  # before the end it may invalidate
            target = self.journal.end
            start = self._synced_end
            if target <= start or (upto is not None and start >= upto):
                return
            try:
                self._effects.sync_partitions(self.journal.entries(start, target))
                self.journal.flush()  # after the partitions: an entry never outlives its bytes
            except OSError as exc:
                log.error("%s: fsync of journal entries %d..%d failed: %s; they do not "
                          "count as held", self.name, start, target, exc)
                raise SyncFailedError(f"fsync of journal entries {start}..{target} failed: "
                                      f"{exc}") from exc
            self.syncs += 1
            with self._lock:
                if generation != self._truncation_generation:
                    return  # truncated meanwhile: what was synced may not be those entries
                self._synced_end = max(self._synced_end, target)
                self._step_locked(raft.LogChanged(self._view(), synced_end=self._synced_end))
                self._changed.notify_all()

    def transfer_leadership(self, timeout_s: float, target: int | None = None) -> bool:
        """Hand leadership to `target` (None: the voter best caught up) and wait until this
        broker stepped down, at most `timeout_s` (raft.py, "leadership transfer"): from now on
        it answers and takes nothing as leader; the target is told to stand on its first fetch
        that holds the whole journal. Given up (it leads on) when the target has not fetched
        for `transfer_silence_s` since the hand-over began: a live target fetches at once
        (its long-poll is woken), so a silent one is stopping too, or gone -- as when a whole
        cluster is stopped at once. True once this broker no longer leads; False when it did not
        lead (or has no peers) or gave up."""
        started = self._clock()
        with self._lock:
            state = self._state
            if state.role is not raft.Role.LEADER or not self._peers:
                return False
            self._step_locked(raft.TransferLeadership(target, started + timeout_s))
            target = self._state.transfer_to
            if target is None:
                return False  # no voter to hand over to (all learners)
            log.info("%s: handing leadership of epoch %d to broker %d",
                     self.name, state.epoch, target)
            self._changed.notify_all()  # a long-polling target asks again, and is told
        silence_s = self.config.transfer_silence_s
        while True:
            self.wait_changed(lambda: self._state.role is not raft.Role.LEADER
                              or self._state.transfer_to is None, silence_s / 4)
            with self._lock:
                state = self._state
                if state.role is not raft.Role.LEADER:
                    return True
                now = self._clock()
                heard_s = max(started, state.last_fetch_s.get(target, float("-inf")))
                if state.transfer_to is None or now - heard_s >= silence_s \
                        or now - started >= timeout_s:
                    self._step_locked(raft.AbandonTransfer())
                    break
        self.counters.transfers_abandoned += 1
        log.warning("%s: broker %d did not take leadership over (silent for %.1f s or "
                    "not caught up within %.1f s); this broker leads on", self.name,
                    target, silence_s, timeout_s)
        return False

    def tick(self) -> None:
        with self._lock:
            self._step_locked(raft.Tick())

    def save_commit_if_due(self) -> None:
        """Save the commit and applied indexes if they moved and the last save is
        `commit_persist_interval_s` old (the commit saver's thread; tests)."""
        with self._lock:
            due = self._commit_persist_due_locked()
        if due is not None:
            # Outside the node lock: the saves fsync (four times), and produces, acks and the
            # followers' fetches all wait on that lock. The stores are monotonic and locked
            # themselves, so a save that lands late only writes a lower bound later.
            self._persist_commit(*due)

    # -- carrying out actions (under _lock) ------------------------------------------------

    def _step_locked(self, event) -> list:
        if not isinstance(event, raft.LogChanged) and self._state.log != self._view():
            # The journal grew behind the state machine's back (a produce's append whose
            # leader_appended() has not run yet): no step -- a vote, a step-down, an election
            # and its NOOP's index -- is taken on a view without it.
            self._step_locked(raft.LogChanged(self._view()))
        state, actions = raft.step(self.raft_config, self._state, event, self._clock(),
                                   self._rng)
        # The writes the new state stands on first, and the state adopted only once they are
        # done: a refused write (a full disk) leaves the node as it was, so it never answers
        # on an unpersisted vote, nor leads without its NOOP.
        for action in actions:
            if isinstance(action, _WRITES_FIRST):
                self._execute_locked(action)
        self._state = state
        for action in actions:
            if not isinstance(action, _WRITES_FIRST):
                self._execute_locked(action)
        return actions

    @staticmethod
    def _first(actions: list, kind: type):
        found = next((action for action in actions if isinstance(action, kind)), None)
        assert found is not None, f"state machine gave no {kind.__name__}"
        return found

    def _execute_locked(self, action) -> None:
        if isinstance(action, raft.PersistQuorum):
            with self._space.writing(self._directory):
                self._quorum_store.save(QuorumState(action.epoch, action.voted_for))
        elif isinstance(action, raft.SendVotes):
            self._votes_to_send.append(action)
        elif isinstance(action, raft.AppendNoop):
            self.journal.set_leading_epoch(action.epoch)
            try:
                self.journal.append(action.epoch, EntryKind.NOOP)
            except BaseException:
                self.journal.set_leading_epoch(None)  # not leading after all (see _step_locked)
                raise
            self.counters.elections_won += 1
            self._offsets_reload = True  # the new leader's table: rebuilt from its own log
        elif isinstance(action, raft.BecomeVoter):
            self.identity = BrokerIdentity(self.identity.cluster_id, self.identity.incarnation,
                                           voter=True)
            with self._space.writing(self._directory):
                self._identity_store.save(self.identity)
            if self._signer is not None:
                self._signer.identify(self.identity.cluster_id, self.identity.incarnation,
                                      learner=False)
            log.warning("%s: caught up with the cluster; a voter from epoch %d on",
                        self.name, self._state.epoch)
        elif isinstance(action, raft.CommitAdvanced):
            self._apply_commits_locked(action.commit)
        elif isinstance(action, raft.RoleChanged):
            self._role_changed_locked(action)
        # ApplyEntries, Truncate, AnswerVote and AnswerFetch are read by the caller.

    def _role_changed_locked(self, action: raft.RoleChanged) -> None:
        if action.role is not raft.Role.LEADER:
            self.journal.set_leading_epoch(None)
        log.info("%s: %s of epoch %d (leader %s)", self.name,
                 action.role.value, action.epoch, action.leader_id)
        self._changed.notify_all()

    def _apply_commits_locked(self, commit: int) -> None:
        """Make entries below `commit` visible (commit_apply.py): high watermarks, and a
        DELETE_TOPIC's removal of the incarnation it names; then persist the applied index
        after a delete, tell the broker which partitions moved, and wake the waiters."""
        touched, deleted = self._commits.apply(commit)
        if deleted:
            self._persist_applied_locked()
        for topic, partition in touched:
            self._on_partition_visible(topic, partition)
        self._changed.notify_all()

    def _persist_applied_locked(self) -> None:
        try:
            with self._space.writing(self._directory):
                self._applied_store.save(self._commits.applied)
        except StorageFullError:
            pass  # a restart applies from an older index: DELETEs are idempotent (topic ids)

    def _commit_persist_due_locked(self, force: bool = False) -> tuple[int, int] | None:
        """(commit, applied) to persist now, or None: unchanged since the last save, or saved
        less than `commit_persist_interval_s` ago (unless `force`)."""
        commit = self._state.commit
        now = self._clock()
        if commit == self._persisted_commit:
            return None
        if not force and now - self._persisted_at_s < self.config.commit_persist_interval_s:
            return None
        self._persisted_at_s = now
        return commit, self._commits.applied

    def _persist_commit(self, commit: int, applied: int) -> None:
        """Save the commit and applied indexes (lower bounds a restart starts from); with or
        without the node lock."""
        try:
            with self._space.writing(self._directory):
                self._commit_store.save(commit)
                self._applied_store.save(applied)
        except StorageFullError:
            return  # a restart then starts from an older commit, which is safe; tried again
        with self._lock:
            self._persisted_commit = max(self._persisted_commit, commit)

    def _view(self) -> raft.LogView:
        return raft.LogView(*self.journal.log_state())

    # -- the replication loop --------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self.liveness.touch()
            try:
                self._one_round()
            except StorageFullError:
                # Counted and logged once per episode by the DiskSpace; a follower would
                # otherwise fetch (and drop) up to fetch_bytes_max every tick.
                self._stop.wait(self.config.storage_full_pause_s)
            except (KaskaError, OSError) as exc:
                # One bad round (a peer's garbage, a disk error) must not end replication.
                log.warning("%s: replication round failed: %s", self.name,
                            exc)
                self._stop.wait(self.config.tick_interval_s)

    def _commit_save_failed(self, exc: Exception) -> None:
        log.warning("%s: saving the commit index failed: %s", self.name, exc)

    def _one_round(self) -> None:
        self.tick()
        self._maybe_compact()
        while self._votes_to_send:
            self._run_vote_round(self._votes_to_send.pop(0))
        self._settle_offsets()
        state = self._state
        if state.role is raft.Role.LEADER or not self._peers:
            # What no produce waiter synced (its NOOP, acks=1 batches) counts within a round.
            self.sync_appended()
            self._stop.wait(self.config.tick_interval_s)
            return
        if state.pre_voting or state.role is raft.Role.CANDIDATE:
            # Votes are out; answers come in through _run_vote_round. Meanwhile ask around,
            # in case someone already leads this epoch.
            self._stop.wait(self.config.tick_interval_s)
        target = raft.fetch_target(state)
        unheard = sorted(raft.unheard_voters(self.raft_config, state) - {target})
        if unheard:
            # A learner needs every voter's epoch: ask one that has not spoken yet (it answers
            # at once: a non-leader says NOT_LEADER with its epoch).
            self._fetch_once(None, probe=unheard[self._next_peer % len(unheard)])
        self._fetch_once(target)

    def _maybe_compact(self) -> None:
        """Fold the applied prefix into the journal's snapshot once the journal is over its
        bounds. A leader keeps what a follower lagging by less than half of
        `journal_entries_max` still needs (it catches up from entries, cheaper than a snapshot
        install); one further behind installs the snapshot. Loop thread only (the one that
        truncates, so nothing folded is cut meanwhile)."""
        journal, config = self.journal, self.config
        held = journal.end - journal.start
        if held <= config.journal_entries_max and journal.tail_bytes <= config.journal_bytes_max:
            return
        with self._lock:
            upto = self._commits.applied
            state = self._state
            if state.role is raft.Role.LEADER and self._peers:
                lagging = min(state.match.get(peer, 0) for peer in self._peers)
                upto = min(upto, max(lagging, journal.end - config.journal_entries_max // 2))
        if upto - journal.start < max(1, held // 2):
            return  # too little to fold (the commit or a follower lags): wait for more
        # The snapshot must never outlive the bytes it covers (a machine crash): sync them.
        self._effects.sync_partitions(journal.entries(journal.start, upto))
        journal.compact(upto)
        self.counters.compactions += 1
        log.info("%s: journal compacted below %d (%d entries held, %d bytes)",
                 self.name, upto, journal.end - journal.start, journal.tail_bytes)
        with self._lock:
            self._step_locked(raft.LogChanged(self._view()))

    def _settle_offsets(self) -> None:
        with self._lock:
            reload, self._offsets_reload = self._offsets_reload, False
            backlog, self._offsets_backlog = self._offsets_backlog, []
        if reload:
            self._on_offsets_truncated()
            return
        for batch in backlog:
            self._on_offsets_batch(batch)

    def _run_vote_round(self, request: raft.SendVotes) -> None:
        """Ask every peer at once; stop listening as soon as the round is decided, so a paused
        peer costs nothing when the others answer."""
        wire = WireVoteRequest(self.config.node_id, request.epoch, request.last_epoch,
                               request.end, request.pre_vote, request.transfer)
        if request.transfer:
            self.counters.transfer_candidacies += 1
            log.warning("%s: told to stand by the leader; asking for votes in epoch %d",
                        self.name, request.epoch)
        futures = self._peer_requests.send_to_each(request.to, wire)
        try:
            for future in as_completed(futures, timeout=self.config.vote_timeout_s):
                if not self._absorb_vote(futures[future], future, request):
                    return
        except TimeoutError:
            for future, peer in futures.items():
                if not future.done():
                    self._peer_requests.drop(peer)

    def _absorb_vote(self, peer: int, future: Future, request: raft.SendVotes) -> bool:
        """Feed one answer; False once the round is over (won, lost, or moved on)."""
        response = self._peer_requests.result(peer, future, WireVoteResponse)
        if response is not None:
            leader = None if response.leader_id == NO_LEADER else response.leader_id
            with self._lock:
                self._step_locked(raft.VoteResponse(peer, response.epoch, response.granted,
                                                    leader, response.pre_vote))
        state = self._state
        if request.pre_vote:
            return state.pre_voting and state.epoch + 1 == request.epoch
        return state.role is raft.Role.CANDIDATE and state.epoch == request.epoch
