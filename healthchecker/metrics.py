"""A health checker's Prometheus metrics: `NodeMetrics` counts what no state holds yet (deaths,
restarts carried out, heal times); `HealthCheckerCollector` reads those and the node's live
state (election, supervision, heartbeat server, election transport) at scrape time.

Who feeds what: the supervision thread reports each phase transition with the event that
caused it (`on_transition`), the restarter thread each restart it carried out (`restarted`).
Everything else exists already and is only read by the scrape thread: the election and
supervision states are immutable snapshots replaced whole, the counters are plain integers.
The heal times are a `prometheus_client.Histogram` (thread-safe), registered next to the
collector in the node's own registry (`healthchecker_registry`).

Deaths are the ones *this* checker detected (every checker tracks liveness, leader or not),
by the cause it saw; restarts carried out are the leader's; `healthchecker_service_restarts_total`
is the shared supervision's count (its own and its peers' restarts, kept across checker
restarts by the checkpoint), so any checker tells how often each service was restarted.

Heal time: from the moment this checker saw the service stop being up (dead, or starting by
a peer's restart) to its first sign of life after a restart (STARTING -> UP). A service that
comes back before its restart (DEAD -> UP: a paused process resumed) was not healed by a
restart and is not observed; one that says goodbye drops its pending start.

Metric families (`healthchecker_` prefix):
- `healthchecker_heartbeats_received_total`, `_heartbeat_connections`,
  `_heartbeat_connections_lost_total`, `_heartbeat_connections_rejected_total`,
  `_heartbeat_frames_malformed_total`, `_heartbeat_frames_refused_total{reason}`;
- `healthchecker_deaths_detected_total{service,cause}`,
  `healthchecker_restarts_performed_total{service,outcome}`, `healthchecker_heal_seconds`
  (histogram), `healthchecker_service_restarts_total{service}`,
  `healthchecker_service_phase{service,phase}` (1 for the current phase),
  `healthchecker_service_last_seen_age_seconds{service}`;
- `healthchecker_elections_total` (started by this node), `healthchecker_role{role}`,
  `healthchecker_leader_id` (-1: none known), `healthchecker_election_packets_dropped_total
  {reason}`, `healthchecker_election_send_failures_total`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from healthchecker import bully
from healthchecker.supervision import (
    Leadership,
    Lost,
    PeerState,
    Phase,
    RestartDone,
    Tick,
    Transition,
)

NO_LEADER_ID = -1
# Local processes heal in tens of milliseconds, containers in seconds, JVMs in up to a minute.
HEAL_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

# Death causes (label values), from the event that made the service DEAD.
CAUSE_CONNECTION_LOST = "connection_lost"  # heartbeat connection closed, or probe refused
CAUSE_HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # up, then silent too long
CAUSE_START_DEADLINE = "start_deadline"  # restarted, no sign of life in time
CAUSE_NEVER_SEEN = "never_seen"  # expected to run, never seen by this node in time
CAUSE_RESTART_FAILED = "restart_failed"  # the restarter could not start it
CAUSE_PEER = "peer_report"  # a peer's shared state says dead
CAUSE_UNCONFIRMED_RESTART = "unconfirmed_restart"  # the previous leader's, redone
CAUSE_OTHER = "other"


def death_cause(event: object, previous: Phase | None) -> str:
    """The label of a transition to DEAD caused by `event` from phase `previous`."""
    if isinstance(event, Lost):
        return CAUSE_CONNECTION_LOST
    if isinstance(event, RestartDone):
        return CAUSE_RESTART_FAILED
    if isinstance(event, PeerState):
        return CAUSE_PEER
    if isinstance(event, Leadership):
        return CAUSE_UNCONFIRMED_RESTART
    if isinstance(event, Tick):
        return {Phase.UP: CAUSE_HEARTBEAT_TIMEOUT, Phase.STARTING: CAUSE_START_DEADLINE,
                Phase.UNKNOWN: CAUSE_NEVER_SEEN}.get(previous, CAUSE_OTHER)
    return CAUSE_OTHER


class NodeMetrics:
    """Counters a HealthCheckerNode feeds. Thread-safe: one lock around the counters (the
    supervision and restarter threads add, the scrape thread reads); `_down_since` belongs to
    the supervision thread alone. Both keyed by service names, which the supervision bounds.
    `heal_seconds` is in no registry yet: `healthchecker_registry` registers it in the node's."""

    def __init__(self, heal_buckets_s: tuple[float, ...] = HEAL_BUCKETS_S) -> None:
        self._lock = threading.Lock()
        self._deaths: Counter[tuple[str, str]] = Counter()  # (service, cause)
        self._restarts: Counter[tuple[str, str]] = Counter()  # (service, "ok" | "failed")
        self.heal_seconds = Histogram(
            "healthchecker_heal_seconds",
            "Seconds from a death seen by this checker to the first sign of life after the "
            "restart.", buckets=heal_buckets_s, registry=None)
        self._down_since: dict[str, float] = {}

    def on_transition(self, event: object, transition: Transition, now: float) -> float | None:
        """A phase change the supervision reported while handling `event` at `now`; returns the
        heal seconds when it ended a restart (the status journal shows them too)."""
        name, phase = transition.name, transition.phase
        if phase is Phase.DEAD:
            with self._lock:
                self._deaths[(name, death_cause(event, transition.previous))] += 1
        if phase in (Phase.DEAD, Phase.STARTING):
            self._down_since.setdefault(name, now)
        elif phase is Phase.UP:
            down_since = self._down_since.pop(name, None)
            if down_since is not None and transition.previous is Phase.STARTING:
                # A clock step counts as 0: a histogram's sum must not go down.
                heal_s = max(now - down_since, 0.0)
                self.heal_seconds.observe(heal_s)
                return heal_s
        elif phase is Phase.DEPARTED:
            self._down_since.pop(name, None)
        return None

    def restarted(self, service: str, ok: bool) -> None:
        with self._lock:
            self._restarts[(service, "ok" if ok else "failed")] += 1

    def counts(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """(deaths by (service, cause), restarts by (service, outcome))."""
        with self._lock:
            return dict(self._deaths), dict(self._restarts)


class HealthCheckerCollector(Collector):
    """Reads one HealthCheckerNode (duck-typed: `metrics`, `election_state`,
    `supervision_state`, `heartbeat_server`, `transport`, `clock`) at scrape time."""

    def __init__(self, node) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        yield from self._heartbeats()
        yield from self._supervision()
        yield from self._election()

    def _heartbeats(self) -> Iterator[Metric]:
        server = self._node.heartbeat_server
        counters = server.counters  # single-key reads: no iteration while the server adds
        yield CounterMetricFamily("healthchecker_heartbeats_received",
                                  "Heartbeat frames received from services and peers.",
                                  value=counters.get("frames", 0))
        yield GaugeMetricFamily("healthchecker_heartbeat_connections",
                                "Heartbeat connections open.", value=server.connection_count)
        for name, key, doc in (
            ("lost", "lost_connections", "closed by the sender without a goodbye"),
            ("rejected", "rejected_connections", "refused: too many open"),
        ):
            yield CounterMetricFamily(f"healthchecker_heartbeat_connections_{name}",
                                      f"Heartbeat connections {doc}.",
                                      value=counters.get(key, 0))
        yield CounterMetricFamily("healthchecker_heartbeat_frames_malformed",
                                  "Heartbeat frames that did not parse (connection closed).",
                                  value=counters.get("malformed_frames", 0))
        refused = CounterMetricFamily(
            "healthchecker_heartbeat_frames_refused", "Heartbeat frames refused, by reason "
            "(unauthenticated: connection closed; replayed, stale: dropped).", labels=["reason"])
        for reason in ("unauthenticated", "replayed", "stale"):
            refused.add_metric([reason], counters.get(f"{reason}_frames", 0))
        yield refused

    def _supervision(self) -> Iterator[Metric]:
        node = self._node
        deaths, restarts = node.metrics.counts()
        family = CounterMetricFamily("healthchecker_deaths_detected",
                                     "Deaths this checker detected, by service and cause.",
                                     labels=["service", "cause"])
        for (service, cause), value in sorted(deaths.items()):
            family.add_metric([service, cause], value)
        yield family
        family = CounterMetricFamily("healthchecker_restarts_performed",
                                     "Restarts this checker carried out (as leader).",
                                     labels=["service", "outcome"])
        for (service, outcome), value in sorted(restarts.items()):
            family.add_metric([service, outcome], value)
        yield family
        yield from self._services(node.supervision_state, node.clock)

    @staticmethod
    def _services(state, clock: Callable[[], float]) -> Iterator[Metric]:
        now = clock()
        restarts = CounterMetricFamily(
            "healthchecker_service_restarts",
            "Restarts of the service in the shared supervision state (any leader's).",
            labels=["service"])
        phase = GaugeMetricFamily("healthchecker_service_phase",
                                  "1 for the service's current supervision phase.",
                                  labels=["service", "phase"])
        seen = GaugeMetricFamily("healthchecker_service_last_seen_age_seconds",
                                 "Seconds since the service's last heartbeat or answered probe.",
                                 labels=["service"])
        for service, record in sorted(state.records.items()):
            restarts.add_metric([service], record.restart_count)
            for candidate in Phase:
                phase.add_metric([service, candidate.value],
                                 1 if record.phase is candidate else 0)
            if record.last_seen_at is not None:
                seen.add_metric([service], max(now - record.last_seen_at, 0.0))
        yield from (restarts, phase, seen)

    def _election(self) -> Iterator[Metric]:
        state = self._node.election_state
        transport = self._node.transport
        yield CounterMetricFamily("healthchecker_elections",
                                  "Bully elections this checker started.",
                                  value=state.elections_started)
        role = GaugeMetricFamily("healthchecker_role", "1 for this checker's election role.",
                                 labels=["role"])
        for candidate in bully.Role:
            role.add_metric([candidate.value], 1 if state.role is candidate else 0)
        yield role
        yield GaugeMetricFamily(
            "healthchecker_leader_id", "Node id of the leader this checker follows or is; -1: "
            "none known (electing).",
            value=NO_LEADER_ID if state.leader_id is None else state.leader_id)
        dropped = CounterMetricFamily("healthchecker_election_packets_dropped",
                                      "Election packets dropped, by reason.", labels=["reason"])
        # dict() of a Counter is one C-level copy under the GIL: no "changed size" race with
        # the election thread adding a new reason.
        for reason, value in sorted(dict(transport.dropped).items()):
            dropped.add_metric([reason], value)
        yield dropped
        yield CounterMetricFamily("healthchecker_election_send_failures",
                                  "Election packets that could not be sent.",
                                  value=transport.send_failures)


def healthchecker_registry(node) -> CollectorRegistry:
    """A registry of one HealthCheckerNode (its own, not the process-wide default): the
    collector, and the node's heal-time histogram."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCheckerCollector(node))
    registry.register(node.metrics.heal_seconds)
    return registry
