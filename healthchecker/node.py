"""One health checker: the election loop, the liveness monitor and the supervisor, wired together.

Threads (all daemons, all stopped by `stop()`):
- election: UDP receive with a timeout up to the state machine's next deadline, then `step`.
- supervisor: every `supervise_interval_s`, if this node leads, `decide` and restart.
- heartbeat server and TCP probes (healthchecker.monitor).
- heartbeat sender: this node beats to the other health checkers, who restart it if it dies.

Every restart is logged with its cause as one `RESTART ...` line, and every role change as one
`ROLE ...` line, so the logs alone tell what happened when.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from common.checkpoint import CheckpointError, CheckpointStore, NoValidCheckpointError
from common.heartbeat import HeartbeatSender
from healthchecker import bully
from healthchecker.monitor import HeartbeatServer, LivenessTable, Probe, ProbeRunner
from healthchecker.restarter import Restarter, RestartError
from healthchecker.supervisor import (
    SupervisorCheckpointError,
    SupervisorConfig,
    SupervisorState,
    decide,
    from_checkpoint,
    set_leadership,
    to_checkpoint,
)
from healthchecker.transport import UdpTransport

log = logging.getLogger("healthchecker")

RECEIVE_TIMEOUT_S_MIN = 0.005
RECEIVE_TIMEOUT_S_MAX = 0.1
EXPECTED_REFRESH_S = 5.0


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
    supervisor: SupervisorConfig
    heartbeat_interval_s: float = 1.0
    probes: Sequence[Probe] = field(default_factory=tuple)
    probe_interval_s: float = 1.0
    supervise_interval_s: float = 0.1
    checkpoint_dir: str | None = None


class HealthCheckerNode:
    def __init__(self, config: NodeConfig, restarter: Restarter, clock=time.monotonic) -> None:
        self.config = config
        self.restarter = restarter
        self.clock = clock
        self._stop = threading.Event()
        self._election_lock = threading.Lock()
        self.election_state = bully.initial_state(config.election)
        self.table = LivenessTable(clock)
        self.transport = UdpTransport(config.node_id, config.listen, config.peers, config.secret)
        self.heartbeat_server = HeartbeatServer(config.heartbeat_listen, self.table)
        self.probes = ProbeRunner(config.probes, self.table, config.probe_interval_s)
        self.heartbeat_sender = HeartbeatSender(
            config.name, targets=config.heartbeat_peers, interval_s=config.heartbeat_interval_s
        )
        self.checkpoints = (
            CheckpointStore(config.checkpoint_dir, name="supervisor")
            if config.checkpoint_dir
            else None
        )
        self.supervisor_state = self._restore_supervisor_state()
        self._expected: set[str] = set()
        self._expected_at = float("-inf")
        self._threads = [
            threading.Thread(target=self._election_loop, name="election", daemon=True),
            threading.Thread(target=self._supervisor_loop, name="supervisor", daemon=True),
        ]

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> HealthCheckerNode:
        self.heartbeat_server.start()
        self.probes.start()
        self.heartbeat_sender.start()
        self._apply(bully.Start())
        for thread in self._threads:
            thread.start()
        log.info(
            "STARTED node=%d name=%s election=%s:%d heartbeats=%s:%d",
            self.config.node_id, self.config.name, *self.transport.address,
            *self.heartbeat_server.address,
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

    @property
    def is_leader(self) -> bool:
        return self.election_state.is_leader

    # --- election --------------------------------------------------------------------------
    def _apply(self, event: bully.Event) -> None:
        with self._election_lock:
            self.election_state, actions = bully.step(self.election_state, event, self.clock())
        node_id = self.config.node_id
        for action in actions:
            if isinstance(action, bully.Send):
                self.transport.send(action.to, action.message)
            elif isinstance(action, bully.BecameLeader):
                log.info("ROLE node=%d role=leader", node_id)
            elif isinstance(action, bully.BecameFollower):
                log.info("ROLE node=%d role=follower leader=%d", node_id, action.leader_id)
            elif isinstance(action, bully.LeaderLost):
                log.info("ROLE node=%d role=electing previous=%d", node_id, action.previous)

    def _election_loop(self) -> None:
        while not self._stop.is_set():
            deadline = bully.next_timer_at(self.election_state)
            wait_s = RECEIVE_TIMEOUT_S_MAX if deadline is None else deadline - self.clock()
            wait_s = min(max(wait_s, RECEIVE_TIMEOUT_S_MIN), RECEIVE_TIMEOUT_S_MAX)
            message = self.transport.receive(wait_s)
            if message is not None:
                self._apply(bully.Received(message))
            # Tick after every packet too: a flood of packets must not starve the deadlines.
            self._apply(bully.Tick())

    # --- supervision -----------------------------------------------------------------------
    def _supervisor_loop(self) -> None:
        while not self._stop.wait(self.config.supervise_interval_s):
            self.supervise_once()

    def supervise_once(self) -> None:
        now = self.clock()
        state = set_leadership(self.supervisor_state, self.is_leader, now)
        if state.leader_since is None:
            self.supervisor_state = state
            return
        expected = self._expected_services(now)
        sightings = self.table.snapshot()
        state, decisions = decide(state, self.config.supervisor, sightings, now, expected)
        self.supervisor_state = state
        for decision in decisions:
            log.warning(
                "RESTART service=%s attempt=%d backoff_s=%g cause=%s",
                decision.name, decision.attempt, decision.backoff_s, decision.cause,
            )
            try:
                outcome = self.restarter.restart(decision.name, decision.cause)
            except RestartError as error:
                log.error("RESTART_FAILED service=%s error=%s: %s",
                          decision.name, type(error).__name__, error)
                continue
            log.info("RESTARTED service=%s action=%s %s", outcome.name, outcome.action,
                     outcome.detail)
        if decisions:
            self._checkpoint(now)

    def _expected_services(self, now: float) -> set[str]:
        if now - self._expected_at >= EXPECTED_REFRESH_S:
            self._expected_at = now
            try:
                self._expected = self.restarter.expected_services()
            except RestartError as error:
                log.warning("cannot list expected services: %s", error)
        return self._expected

    def _restore_supervisor_state(self) -> SupervisorState:
        if self.checkpoints is None:
            return SupervisorState()
        try:
            data = self.checkpoints.load_json()
            if data is None:
                return SupervisorState()
            state = from_checkpoint(data, self.clock(), time.time())
        except (NoValidCheckpointError, SupervisorCheckpointError, json.JSONDecodeError) as error:
            log.error("supervisor checkpoint unusable, starting fresh: %s", error)
            return SupervisorState()
        log.info("restored restart counts for %d services", len(state.records))
        return state

    def _checkpoint(self, now: float) -> None:
        if self.checkpoints is None:
            return
        try:
            self.checkpoints.save_json(to_checkpoint(self.supervisor_state, now, time.time()))
        except (CheckpointError, OSError) as error:
            # Losing restart counts is better than a supervisor that stops supervising.
            log.error("cannot checkpoint the supervisor state: %s", error)
