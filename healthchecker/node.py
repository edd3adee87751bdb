"""One health checker: the election, the liveness monitor and the supervision, wired together.

Threads (all daemons, all stopped by `stop()`):
- election: UDP receive with a timeout up to the bully machine's next deadline, then `step`;
  STATE packets from peers are queued for the supervision as `PeerState` events.
- supervision: the only thread that steps `healthchecker.supervision`. It takes events from one
  queue (sightings, goodbyes and losses from the heartbeat server and the probes, leadership
  changes from the election, restart outcomes, peer states) and ticks at least every
  `supervise_interval_s`. Every node does this all the time, leader or not; only the leader's
  machine emits restarts. The leader sends its state to every peer every `state_interval_s` and
  at once after a restart decision; a follower sends its own to the leader at the same pace and
  at once when it starts following (so a former leader hands its knowledge over).
- restarter: carries out restarts one at a time (backends are not thread-safe), refreshes the
  list of expected services every `EXPECTED_REFRESH_S`, and saves checkpoints (an fsync must not
  stall the supervision's clock); reports back as events.
- heartbeat server and probes (healthchecker.monitor); the heartbeat sender: this node beats to
  the other health checkers, who restart it if it dies.

A lost heartbeat connection (or a goodbye) of the checker this node follows is also a
`PeerDown` for the election: a killed leader is replaced without waiting out its silence.
Peers' heartbeat names are `<prefix><id>` when this node's own name is `<prefix><node_id>`
(`healthchecker-1`, ...), or `NodeConfig.peer_names`.

Log lines: `RESTART ...` (decision, with its cause), `RESTARTED ...`/`RESTART_FAILED ...`,
`PHASE service=... phase=... previous=...`, `ROLE ...`, `SEEN`/`DEPARTED`/`LOST` (monitor), so
the logs alone tell what happened when.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.checkpoint import CheckpointError, CheckpointStore, NoValidCheckpointError
from common.heartbeat import HeartbeatSender
from common.liveness import Liveness
from healthchecker import bully, supervision
from healthchecker.errors import HealthCheckerConfigError, require_positive_s
from healthchecker.journal import KIND_RESTART, KIND_RESTARTED, KIND_ROLE, EventJournal
from healthchecker.metrics import NodeMetrics
from healthchecker.monitor import HeartbeatServer, LivenessTable, Probe, ProbeRunner
from healthchecker.restarter import Restarter, RestartError
from healthchecker.supervision import (
    Departed,
    Expected,
    Leadership,
    Lost,
    PeerState,
    RestartDone,
    ServiceRecord,
    SupervisionConfig,
    SupervisionState,
    SupervisorCheckpointError,
)
from healthchecker.transport import StateMessage, UdpTransport

log = logging.getLogger("healthchecker")

RECEIVE_TIMEOUT_S_MIN = 0.005
RECEIVE_TIMEOUT_S_MAX = 0.1
# Also how soon a service killed while starting is known dead (supervision/machine.py).
EXPECTED_REFRESH_S = 1.0
RESTARTER_POLL_S = 0.2
_SHARE_NOW = object()  # queued by the election thread: send our state to the leader now


@dataclass(frozen=True)
class _SaveCheckpoint:
    data: dict


class NodeConfigError(HealthCheckerConfigError):
    """Node settings that do not fit together."""


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    name: str
    listen: tuple[str, int]
    peers: dict[int, tuple[str, int]]  # election addresses of the other health checkers
    heartbeat_listen: tuple[str, int]
    heartbeat_peers: Sequence[tuple[str, int]]  # heartbeat addresses of the other checkers
    secret: bytes
    election: bully.ElectionConfig
    supervision: SupervisionConfig
    heartbeat_interval_s: float = 1.0
    probes: Sequence[Probe] = field(default_factory=tuple)
    probe_interval_s: float = 1.0
    supervise_interval_s: float = 0.1
    state_interval_s: float = 0.5
    checkpoint_dir: str | None = None
    peer_names: Mapping[str, int] | None = None  # heartbeat name -> id; default: see module doc

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_s", "probe_interval_s", "supervise_interval_s",
                     "state_interval_s"):
            require_positive_s(NodeConfigError, name, getattr(self, name))
        if set(self.peers) != set(self.election.peer_ids):
            raise NodeConfigError(f"election peers {sorted(self.election.peer_ids)} differ "
                                  f"from the addressed peers {sorted(self.peers)}")
        if self.supervision.self_name != self.name:
            raise NodeConfigError(f"the supervision's self_name {self.supervision.self_name!r} "
                                  f"is not this node's name {self.name!r}")


def default_peer_names(name: str, node_id: int, peer_ids) -> dict[str, int]:
    """{'healthchecker-2': 2, ...} when `name` is '<prefix><node_id>'; {} otherwise."""
    suffix = str(node_id)
    if not name.endswith(suffix) or name == suffix:
        return {}
    prefix = name[: -len(suffix)]
    return {f"{prefix}{peer}": peer for peer in peer_ids}


class HealthCheckerNode:
    def __init__(self, config: NodeConfig, restarter: Restarter, clock=time.monotonic) -> None:
        self.config = config
        self.restarter = restarter
        self.clock = clock
        self._stop = threading.Event()
        self._election_lock = threading.Lock()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._restarts: queue.SimpleQueue = queue.SimpleQueue()
        self.metrics = NodeMetrics()  # read by healthchecker.metrics at scrape time
        self.journal = EventJournal()  # read by healthchecker.status for the status page
        # Wall clock of the last change of the leader this node knows (None: none known yet).
        self.leader_since_s: float | None = None
        self.peer_names = dict(
            config.peer_names
            if config.peer_names is not None
            else default_peer_names(config.name, config.node_id, config.peers)
        )
        self.election_state = bully.initial_state(config.election)
        self.table = LivenessTable(clock, listener=self._on_liveness)
        self.transport = UdpTransport(
            config.node_id, config.listen, config.peers, config.secret, clock=clock
        )
        self.heartbeat_server = HeartbeatServer(config.heartbeat_listen, self.table,
                                                secret=config.secret)
        self.probes = ProbeRunner(config.probes, self.table, config.probe_interval_s)
        self.heartbeat_sender = HeartbeatSender(
            config.name, targets=config.heartbeat_peers, interval_s=config.heartbeat_interval_s,
            secret=config.secret,
        )
        self.checkpoints = (
            CheckpointStore(config.checkpoint_dir, name="supervisor")
            if config.checkpoint_dir
            else None
        )
        self.supervision_state: SupervisionState = supervision.initial_state(
            config.supervision, clock(), self._restore_records()
        )
        self._threads = [
            threading.Thread(target=self._election_loop, name="election", daemon=True),
            threading.Thread(target=self._supervision_loop, name="supervision", daemon=True),
            threading.Thread(target=self._restarter_loop, name="restarter", daemon=True),
        ]
        # This node's own loops, touched each turn, for its /healthz (common/liveness.py). Not
        # the restarter's: one restart may rightly take longer than the staleness bound.
        self.election_progress = Liveness("election loop", clock)
        self.supervision_progress = Liveness("supervision loop", clock)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> HealthCheckerNode:
        self.heartbeat_server.start()
        self.probes.start()
        self.heartbeat_sender.start()
        self._apply(bully.Start())
        for thread in self._threads:
            thread.start()
        log.info(
            "STARTED node=%d name=%s election=%s:%d heartbeats=%s:%d incarnation=%d",
            self.config.node_id, self.config.name, *self.transport.address,
            *self.heartbeat_server.address, self.transport.incarnation,
        )
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self.heartbeat_sender.stop(say_goodbye=True)
        self.probes.stop()
        self.heartbeat_server.stop()
        self.transport.close()
        self.restarter.close()
        dropped = dict(self.transport.dropped)
        log.info("STOPPED node=%d dropped_packets=%s", self.config.node_id, dropped)

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._stop.wait(timeout_s)

    def request_stop(self) -> None:
        self._stop.set()

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def is_leader(self) -> bool:
        return self.election_state.is_leader

    # --- election --------------------------------------------------------------------------
    def _apply(self, event: bully.Event) -> None:
        with self._election_lock:
            previous = self.election_state.leader_id
            self.election_state, actions = bully.step(self.election_state, event, self.clock())
            if self.election_state.leader_id != previous:
                self.leader_since_s = time.time()
        node_id = self.config.node_id
        for action in actions:
            if isinstance(action, bully.Send):
                self.transport.send(action.to, action.message)
            elif isinstance(action, bully.BecameLeader):
                log.info("ROLE node=%d role=leader", node_id)
                self.journal.record(KIND_ROLE, self.config.name, "became the leader")
                self._events.put(Leadership(True))
            elif isinstance(action, bully.BecameFollower):
                log.info("ROLE node=%d role=follower leader=%d", node_id, action.leader_id)
                self.journal.record(KIND_ROLE, self.config.name,
                                    f"follows leader {action.leader_id}")
                self._events.put(Leadership(False))
                self._events.put(_SHARE_NOW)
            elif isinstance(action, bully.LeaderLost):
                log.info("ROLE node=%d role=electing previous=%d", node_id, action.previous)
                self.journal.record(KIND_ROLE, self.config.name,
                                    f"lost leader {action.previous}: electing")
                self._events.put(Leadership(False))

    def _election_loop(self) -> None:
        while not self._stop.is_set():
            self.election_progress.touch()
            deadline = bully.next_timer_at(self.election_state)
            wait_s = RECEIVE_TIMEOUT_S_MAX if deadline is None else deadline - self.clock()
            wait_s = min(max(wait_s, RECEIVE_TIMEOUT_S_MIN), RECEIVE_TIMEOUT_S_MAX)
            message = self.transport.receive(wait_s)
            if isinstance(message, StateMessage):
                self._events.put(PeerState(message.sender, message.entries))
            elif message is not None:
                self._apply(bully.Received(message))
            # Tick after every packet too: a flood of packets must not starve the deadlines.
            self._apply(bully.Tick())

    # --- liveness evidence (heartbeat server and probe threads) ----------------------------
    def _on_liveness(self, event: supervision.Event) -> None:
        self._events.put(event)
        if isinstance(event, Lost | Departed) and event.name in self.peer_names:
            self._apply(bully.PeerDown(self.peer_names[event.name]))

    # --- supervision -----------------------------------------------------------------------
    def _supervision_loop(self) -> None:
        next_share_at = self.clock()
        while not self._stop.is_set():
            self.supervision_progress.touch()
            try:
                item = self._events.get(timeout=self.config.supervise_interval_s)
            except queue.Empty:
                item = None
            if item is _SHARE_NOW:
                self._share_state()
            elif item is not None:
                self._step(item)
            self._step(supervision.Tick())
            if self.clock() >= next_share_at:
                self._share_state()
                next_share_at = self.clock() + self.config.state_interval_s

    def _step(self, event: supervision.Event) -> None:
        now = self.clock()
        self.supervision_state, actions = supervision.step(self.supervision_state, event, now)
        restarted = False
        for action in actions:
            if isinstance(action, supervision.Restart):
                log.warning(
                    "RESTART service=%s attempt=%d backoff_s=%g cause=%s",
                    action.name, action.attempt, action.backoff_s, action.cause,
                )
                self._restarts.put(action)
                self.journal.record(KIND_RESTART, action.name,
                                    f"attempt {action.attempt}: {action.cause}")
                restarted = True
            elif isinstance(action, supervision.Inspect):
                self._restarts.put(action)
            elif isinstance(action, supervision.Transition):
                log.info("PHASE service=%s phase=%s previous=%s reason=%s", action.name,
                         action.phase, action.previous or "none", action.reason)
                heal_s = self.metrics.on_transition(event, action, now)
                self.journal.record_transition(action, heal_s)
            elif isinstance(action, supervision.ShareState):
                self._share_state()
            elif isinstance(action, supervision.Stalled):
                log.warning("STALLED gap_s=%.2f: this node was frozen; deadlines moved on by "
                            "the gap", action.gap_s)
        if restarted:
            self._checkpoint(now)

    def _share_state(self) -> None:
        election = self.election_state
        if election.is_leader:
            targets = sorted(self.config.peers)
        elif election.role is bully.Role.FOLLOWER and election.leader_id is not None:
            targets = [election.leader_id]
        else:
            return
        entries = supervision.to_shared(self.supervision_state, self.clock())
        self.transport.send_state(targets, entries)

    # --- restarts (one at a time, off the supervision thread) ------------------------------
    def _restarter_loop(self) -> None:
        next_refresh_at = self.clock()
        while not self._stop.is_set():
            if self.clock() >= next_refresh_at:
                self._refresh_expected()
                next_refresh_at = self.clock() + EXPECTED_REFRESH_S
            try:
                job = self._restarts.get(timeout=RESTARTER_POLL_S)
            except queue.Empty:
                continue
            if isinstance(job, _SaveCheckpoint):
                self._save_checkpoint(job.data)
            elif isinstance(job, supervision.Inspect):
                self._inspect(job)
            else:
                self._restart(job)

    def _inspect(self, job: supervision.Inspect) -> None:
        try:
            frozen, detail = self.restarter.inspect(job.name)
        except RestartError as error:
            frozen, detail = None, f"{type(error).__name__}: {error}"
        log.info("INSPECTED service=%s frozen=%s %s", job.name, frozen, detail)
        self._events.put(supervision.Inspected(job.name, job.silent_since, frozen, detail))

    def _restart(self, decision: supervision.Restart) -> None:
        try:
            outcome = self.restarter.restart(decision.name, decision.cause)
        except RestartError as error:
            log.error("RESTART_FAILED service=%s error=%s: %s",
                      decision.name, type(error).__name__, error)
            detail = f"{type(error).__name__}: {error}"
            self.metrics.restarted(decision.name, ok=False)
            self.journal.record(KIND_RESTARTED, decision.name, f"failed: {detail}")
            self._events.put(RestartDone(decision.name, False, detail))
            return
        log.info("RESTARTED service=%s action=%s %s", outcome.name, outcome.action,
                 outcome.detail)
        self.metrics.restarted(decision.name, ok=True)
        self.journal.record(KIND_RESTARTED, decision.name, f"{outcome.action} {outcome.detail}")
        self._events.put(RestartDone(decision.name, True, outcome.detail))

    def _refresh_expected(self) -> None:
        observed_at = self.clock()
        try:
            listing = self.restarter.listing()
        except RestartError as error:
            log.warning("cannot list expected services: %s", error)
            return
        self._events.put(Expected(listing.expected, listing.stopped, observed_at))

    # --- checkpoints -----------------------------------------------------------------------
    def _restore_records(self) -> dict[str, ServiceRecord]:
        if self.checkpoints is None:
            return {}
        try:
            data = self.checkpoints.load_json()
            if data is None:
                return {}
            records = supervision.from_checkpoint(data, self.clock(), time.time())
        except (NoValidCheckpointError, SupervisorCheckpointError, json.JSONDecodeError) as error:
            log.error("supervisor checkpoint unusable, starting fresh: %s", error)
            return {}
        log.info("restored restart counts for %d services", len(records))
        return records

    def _checkpoint(self, now: float) -> None:
        """Queued after the restarts just decided (the restarter thread saves it)."""
        if self.checkpoints is not None:
            data = supervision.to_checkpoint(self.supervision_state, now, time.time())
            self._restarts.put(_SaveCheckpoint(data))

    def _save_checkpoint(self, data: dict) -> None:
        assert self.checkpoints is not None
        try:
            self.checkpoints.save_json(data)
        except (CheckpointError, OSError) as error:
            # Losing restart counts is better than a supervisor that stops supervising.
            log.error("cannot checkpoint the supervisor state: %s", error)
