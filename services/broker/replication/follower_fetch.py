"""The follower's side of replication: the loop thread's fetches from the leader, what it does
with the answers (append, truncate, stale divergences) and the install of the leader's snapshot
(`FollowerFetching`, mixed into `ReplicationNode`, node.py).

Loop thread only: the node's replication loop (`_one_round`, node.py) calls `_fetch_once`, and
only this thread applies entries, truncates or installs a snapshot, so a follower's journal and
partitions change in one order.

Locks: network waits (the fetch's answer, SNAPSHOT_FETCH copies) never hold the node's `_lock`;
applying an answer, truncating and adopting an installed snapshot happen under it (the
`_locked` methods).

Fsync policy `entry`: a fetch's `fetch_end` acknowledges every entry below it (the leader
counts it in its match), so they are fsynced first (`sync_appended`), all of the last round's
at once; a truncation that straddles the sync holds the fetch back a round.

Snapshot install (Raft §7; docs/replication.md "Compaction"): the topics first (under `_lock`),
then each partition's bytes with SNAPSHOT_FETCH (outside `_lock`; snapshot_install.py), synced,
and only then the journal. A crash before that leaves the old journal, and `reconcile` drops
what it does not name.

Uses the node's attributes: config, name, counters, journal, _log, _lock, _state, _stop,
_clock, _peers, _next_peer, _peer_requests, _effects, _commits, _syncing, _synced_end,
_truncation_generation, _offsets_backlog, _offsets_reload, _on_topic_deleted,
_on_partition_visible, and its methods _step_locked, _view, sync_appended.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future

from common.kaska.errors import KaskaError
from common.kaska.protocol.metadata import NO_LEADER
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.replication import raft
from services.broker.replication.snapshot import partition_ends
from services.broker.replication.snapshot_install import copy_partition, make_topics
from services.broker.replication.wire.replica_fetch import (
    EntryKind,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.replica_fetch import FetchOutcome as WireOutcome
from services.broker.replication.wire.snapshot_fetch import Snapshot

log = logging.getLogger(__name__)

_OUTCOME_FROM_WIRE = {
    WireOutcome.ENTRIES: raft.Outcome.ENTRIES,
    WireOutcome.DIVERGING: raft.Outcome.DIVERGING,
    WireOutcome.NOT_LEADER: raft.Outcome.NOT_LEADER,
    WireOutcome.SNAPSHOT: raft.Outcome.SNAPSHOT,
    WireOutcome.TIMEOUT_NOW: raft.Outcome.TIMEOUT_NOW,
}


class FollowerFetching:
    """The loop thread's fetches and what it does with the answers (see the module
    docstring)."""

    def _fetch_once(self, leader: int | None, probe: int | None = None) -> None:
        target = leader if leader is not None else probe if probe is not None \
            else self._round_robin_peer()
        # The request's fetch_end acknowledges every entry below it (the leader counts it in
        # its match): with policy `entry` they are fsynced first, all of the last round's at
        # once. Only this thread appends to a follower's journal, so none come in between.
        self.sync_appended()
        state = self._state
        if self._syncing and self._synced_end < state.log.end:
            # A truncation straddled the sync: never report unsynced entries; next round.
            self._stop.wait(self.config.tick_interval_s)
            return
        request = ReplicaFetchRequest(
            self.config.node_id, state.epoch, state.log.end, state.log.last_epoch,
            self.config.fetch_bytes_max, self.config.fetch_wait_ms if leader is not None else 0)
        future = self._peer_requests.send(target, request)
        if future is None:
            with self._lock:
                self._step_locked(raft.FetchAnswered(target, raft.Outcome.FAILED))
            self._stop.wait(self.config.tick_interval_s)
            return
        # A fetch to find the leader asks for no wait: a live peer answers it at once, so one
        # that does not within vote_timeout_s is paused or gone -- ask the next.
        answer_timeout_s = self.config.request_timeout_s if leader is not None \
            else self.config.vote_timeout_s
        if not self._await_fetch_answer(future, state.epoch, target, answer_timeout_s,
                                        probe=probe is not None):
            # The epoch moved on meanwhile: fetch from whoever leads it, at once -- on a new
            # connection, since a fetch on this one would tell the target this follower read
            # the answer it abandons (the leader lease counts on that, raft.holds_lease).
            self._peer_requests.drop(target)
            return
        # Done, or timed out.
        response = self._peer_requests.result(target, future, ReplicaFetchResponse)
        if response is None:
            self._stop.wait(self.config.tick_interval_s)
            return
        self._absorb_fetch(target, response, request.fetch_end)

    def _await_fetch_answer(self, future: Future, epoch: int, target: int,
                            timeout_s: float, probe: bool = False) -> bool:
        """Wait for a fetch's answer (at most timeout_s; `_result` then judges it);
        False when, meanwhile, this broker took a newer epoch or learned another leader, or
        its election timeout passed. A server thread takes a newer epoch when it grants a
        vote: the target is frozen or deposed, and the successor needs this follower's next
        fetch to commit its first entry. Waiting out a paused leader's fetch would add up to
        request_timeout_s to every failover, at the election and again at the commit.
        `probe`: a learner's question to a voter it has not heard from, whose answer it needs
        whoever leads: a leader learned meanwhile does not abandon it."""
        deadline = time.monotonic() + timeout_s
        while not future.done():
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return True
            state = self._state
            if state.epoch != epoch or (not probe
                                        and raft.fetch_target(state) not in (None, target)):
                log.info("%s: fetch from %d abandoned: epoch %d, leader %s now",
                         self.name, target, state.epoch, state.leader_id)
                return False
            if state.role is raft.Role.FOLLOWER and self._clock() >= state.election_deadline_s:
                # The leader has been silent for a whole election timeout: the loop must
                # tick (and run the pre-vote) now, not after this fetch's own timeout.
                log.info("%s: fetch from %d abandoned: election timeout",
                         self.name, target)
                return False
            try:
                future.result(timeout=min(remaining_s, self.config.tick_interval_s))
            except TimeoutError:
                continue
            except KaskaError:
                return True  # `_result` logs it and drops the link
        return True

    def _round_robin_peer(self) -> int:
        peers = sorted(self._peers)
        self._next_peer = (self._next_peer + 1) % len(peers)
        return peers[self._next_peer]

    def _absorb_fetch(self, sender: int, response: ReplicaFetchResponse,
                      fetch_end: int | None = None) -> None:
        """`fetch_end`: the request's (default: the state machine's journal end, which is what
        `_fetch_once` sends). Only that prefix and the entries appended from this answer are
        known to match the leader, so only they may count as committed."""
        if fetch_end is None:
            fetch_end = self._state.log.end
        leader = None if response.leader_id == NO_LEADER else response.leader_id
        event = raft.FetchAnswered(sender, _OUTCOME_FROM_WIRE[response.outcome], response.epoch,
                                   leader, response.diverging_epoch, response.diverging_end)
        with self._lock:
            actions = self._step_locked(event)  # on the whole journal (see _step_locked)
            install = any(isinstance(action, raft.InstallSnapshot) for action in actions)
            if any(isinstance(action, raft.ApplyEntries) for action in actions):
                # The commit first: a committed delete must go before a later re-create.
                self._step_locked(raft.LogChanged(self._view(), response.commit, fetch_end))
                start = self.journal.end
                try:
                    self._apply_entries_locked(response, fetch_end)
                finally:
                    # Also after a refused apply (full disk): the entries applied before it
                    # are in the journal, and the next fetch must start after them.
                    matched = fetch_end + (self.journal.end - start if start == fetch_end
                                           else 0)
                    self._step_locked(raft.LogChanged(self._view(), response.commit, matched))
            for action in actions:
                if isinstance(action, raft.Truncate):
                    self._truncate_locked(action.end)
                elif isinstance(action, raft.StaleDivergence):
                    self._stale_divergence_locked(action)
        if install and response.snapshot is not None:
            self._install_snapshot(sender, response.epoch, response.snapshot, response.commit)

    # -- installing the leader's snapshot ---------------------------------------------------

    def _install_snapshot(self, leader: int, epoch: int, snapshot: Snapshot,
                          commit: int) -> None:
        """Make this follower hold what the leader's snapshot says, then adopt it as its
        journal (Raft §7). The topics first, then each partition's bytes (SNAPSHOT_FETCH,
        outside `_lock`), synced, and only then the journal: a crash before that leaves the
        old journal, and `reconcile` drops what it does not name (fetched again later). A
        refused or failed fetch ends the attempt; the next round asks again."""
        if snapshot.end <= self.journal.end:
            return  # nothing new (a snapshot of entries held already)
        topics = {topic.name: topic for topic in snapshot.topics}
        with self._lock:
            make_topics(self.journal, self._log, self._commits.hw, topics,
                        self._on_topic_deleted)
        for (topic, number), end in sorted(partition_ends(snapshot).items()):
            described = topics.get(topic)
            if not copy_partition(self._peer_requests, self._log, self.config, leader, epoch,
                                  topic, number, end, described):
                return
        with self._lock:
            # Before the journal: a crash in between restarts from the old journal, whose
            # install starts over; after it, the start enforces the snapshot's log starts.
            self._effects.enforce_log_starts(snapshot)
            self.journal.install(snapshot)
            self._truncation_generation += 1
            self._synced_end = snapshot.end  # the journal and every copied byte are synced
            self._commits.install(snapshot)
            self._offsets_reload = True
            self.counters.snapshots_installed += 1
            log.info("%s: installed leader %d's snapshot (entries below %d, %d topics)",
                     self.name, leader, snapshot.end, len(snapshot.topics))
            self._step_locked(raft.LogChanged(
                self._view(), commit, snapshot.end,
                synced_end=self._synced_end if self._syncing else None))
            for topic, number in self._commits.hw:
                self._on_partition_visible(topic, number)

    def _stale_divergence_locked(self, action: raft.StaleDivergence) -> None:
        self.counters.stale_divergences += 1
        log.warning("%s: leader %d says the journal diverges at %d, below the commit "
                    "index %d; nothing truncated (a stale answer, or committed entries that "
                    "differ: then this broker stays behind)", self.name,
                    action.leader_id, action.end, action.commit)

    # -- applying what the leader sent (under _lock) ----------------------------------------

    def _apply_entries_locked(self, response: ReplicaFetchResponse, fetch_end: int) -> None:
        """Append the leader's entries one by one, in order, as if each came alone: before a
        CREATE_TOPIC the commit index is brought up to it, so that a committed DELETE_TOPIC
        of the name in the same answer is applied first."""
        for header, data in response.batches():
            if header.index != self.journal.end:
                log.warning("%s: entry %d arrived at journal end %d; fetching again",
                            self.name, header.index, self.journal.end)
                return
            if header.kind is EntryKind.CREATE_TOPIC and header.index > fetch_end:
                self._step_locked(raft.LogChanged(self._view(), response.commit, header.index))
            self._effects.apply(header, data, self._commits.hw, self._offsets_backlog)
            self.counters.entries_applied += 1

    def _truncate_locked(self, end: int) -> None:
        """Drop journal entries from `end` on, and what they stand for: the data first, then
        the journal (a crash in between is repaired by reconcile at the next start)."""
        if end < self._state.commit:
            # Raft rules this out; refusing keeps committed data if the rules were broken.
            log.error("%s: refusing to truncate to %d below the commit index %d",
                      self.name, end, self._state.commit)
            return
        doomed, cut = self._effects.cut(end)  # fsynced: the prefix below `end` stays synced
        if not doomed:
            return
        self._truncation_generation += 1
        self._synced_end = min(self._synced_end, end)
        self.counters.truncations += 1
        log.info("%s: truncated the journal to %d (%d entries dropped)",
                 self.name, end, len(doomed))
        if any(key[0] == OFFSETS_TOPIC for key in cut):
            self._offsets_reload = True
        self._step_locked(raft.LogChanged(
            self._view(), synced_end=self._synced_end if self._syncing else None))
