"""Fake inputs for the three services' metrics collectors, and exposition parsing helpers.

Each `fake_*_registry()` builds the service's real registry (its collector, and the health
checker's and query service's `prometheus_client.Histogram`) over small fakes of what it reads
(no sockets, no Spark, no files), so unit tests check names, types and values, and one test
walks all three registries for Prometheus naming conventions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType, SimpleNamespace

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common.kaska.errors import NotLeaderError, UnknownTopicOrPartitionError
from common.kaska.protocol.frames import Api
from healthchecker import bully
from healthchecker.metrics import NodeMetrics, healthchecker_registry
from healthchecker.supervision import (
    Lost,
    Phase,
    ServiceRecord,
    SupervisionConfig,
    Tick,
    Transition,
    initial_state,
)
from services.broker.metrics import BrokerCollector, BrokerCounters
from services.broker.replication.node import ReplicationCounters
from services.broker.replication.raft import LogView, RaftConfig, RaftState, Role
from services.broker.storage.disk_space import DiskSpace
from spark.service.metrics import JobMetrics, query_service_registry
from spark.service.session_job import JobReport

NOW_S = 1000.0

# As every service's `MetricsEndpoint.start()` does: histograms export no `_created` series.
disable_created_metrics()


def families(registry: CollectorRegistry) -> dict:
    """{family name: Metric} of one scrape of `registry`, parsed back from the text format."""
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample_values(family) -> dict[tuple, float]:
    """{(sample name, sorted label pairs): value} of one family."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def histogram_values(histogram: Histogram) -> dict[tuple, float]:
    """`sample_values` of a histogram read directly (registered nowhere)."""
    (family,) = histogram.collect()
    return sample_values(family)


# -- broker ----------------------------------------------------------------------------------


@dataclass
class FakePartitionLog:
    log_start_offset: int
    log_end_offset: int
    size_bytes: int


@dataclass
class FakePartitionTable:
    """As cluster/partition_table.py: topics(), get() (a partition's log and high watermark),
    space."""

    partitions: dict[str, list[FakePartitionLog]]
    vanished: set[str] = field(default_factory=set)  # listed, then deleted before get()
    space: DiskSpace = field(default_factory=lambda: DiskSpace("/nonexistent-data-dir"))
    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)

    def topics(self) -> dict[str, int]:
        return {name: len(parts) for name, parts in self.partitions.items()}

    def get(self, name: str, partition: int) -> SimpleNamespace:
        if name in self.vanished or partition >= len(self.partitions.get(name, ())):
            raise UnknownTopicOrPartitionError(f"{name}/{partition}")
        return SimpleNamespace(log=self.partitions[name][partition],
                               high_watermark=lambda: self.high_watermarks[(name, partition)])


class FakeReplicationGroups:
    def __init__(self, state: RaftState) -> None:
        counters = ReplicationCounters(unknown_replica_requests=1, stale_epoch_requests=2,
                                       elections_won=3, truncations=4, entries_applied=5,
                                       stale_divergences=6, transfers_handed_over=7,
                                       transfers_abandoned=8, transfer_candidacies=9,
                                       followers_stalled=10)
        self.node = SimpleNamespace(state=state, counters=counters,
                                    raft_config=RaftConfig(1, frozenset({1, 2, 3})))

    def replication_nodes(self) -> list[tuple[int, SimpleNamespace]]:
        return [(0, self.node)]

    def role(self, topic: str, partition: int) -> SimpleNamespace:
        """This broker leads every partition while it leads the one group."""
        return SimpleNamespace(is_leader=self.node.state.role is Role.LEADER)


@dataclass
class FakeCommittedOffsets:
    """As cluster/committed_offsets.py: all_committed()."""

    commits: dict[tuple[str, str, int], int]

    def all_committed(self) -> dict[tuple[str, str, int], int]:
        return dict(self.commits)


# Lag: flights.c1/0 has high watermark 12, flights.c1/1 has 0; `gone` vanished.
FAKE_COMMITS = {("spark", "flights.c1", 0): 5, ("spark", "flights.c1", 1): 0,
                ("ahead", "flights.c1", 0): 20, ("old", "gone", 0): 1}


class FakeReply:
    def __init__(self, slice_bytes: list[int], records: int) -> None:
        self.slices = [SimpleNamespace(nbytes=n) for n in slice_bytes]
        self.records = records


def leader_state() -> RaftState:
    """Broker 1 leads epoch 7 of 3 brokers: 2 is caught up to 40 of 50 entries, 3 never
    fetched."""
    return RaftState(role=Role.LEADER, epoch=7, leader_id=1, log=LogView(end=50), commit=40,
                     match=MappingProxyType({2: 40, 3: 0}),
                     last_fetch_s=MappingProxyType({2: NOW_S - 0.25}))


def fake_broker_registry(state: RaftState | None = None,
                         partitions: FakePartitionTable | None = None) -> CollectorRegistry:
    counters = BrokerCounters()
    counters.appended(1000, 10)
    counters.appended(500, 5)
    counters.answered(Api.PRODUCE, None, FakeReply([], 0), took_s=0.004)
    counters.answered(Api.PRODUCE, NotLeaderError("moved"))
    counters.answered(Api.FETCH, None, FakeReply([600, 900], 15))
    counters.answered(Api.REPLICA_FETCH, None, FakeReply([1500], 15))
    counters.answered(999, NotLeaderError("no such api"))
    counters.kafka_answered("Produce", "ok", took_s=0.02)
    partitions = partitions or FakePartitionTable(
        {"flights.c1": [FakePartitionLog(0, 15, 1516), FakePartitionLog(0, 0, 16)],
         "gone": [FakePartitionLog(0, 3, 99)]}, vanished={"gone"},
        high_watermarks={("flights.c1", 0): 12, ("flights.c1", 1): 0})
    groups = FakeReplicationGroups(state or leader_state())
    registry = CollectorRegistry(auto_describe=False)
    listeners = [SimpleNamespace(name="kaska", connection_count=4,
                                 refusals=lambda: {"full": 2, "stopping": 1}),
                 SimpleNamespace(name="kafka", connection_count=1,
                                 refusals=lambda: {"full": 0, "stopping": 0})]
    registry.register(BrokerCollector(counters, partitions, groups, connections=lambda: 4,
                                      clock=lambda: NOW_S, listeners=lambda: listeners,
                                      offsets=FakeCommittedOffsets(FAKE_COMMITS)))
    return registry


# -- health checker --------------------------------------------------------------------------


def checker_node() -> SimpleNamespace:
    """Checker 2 of 3, following 3; `svc` died (connection lost) and healed in 1.5 s."""
    metrics = NodeMetrics()
    metrics.on_transition(Lost("svc", "h:1"), Transition("svc", Phase.UP, Phase.DEAD, "lost"),
                          NOW_S - 2.0)
    metrics.on_transition(Tick(), Transition("svc", Phase.DEAD, Phase.STARTING, "restart"),
                          NOW_S - 1.9)
    metrics.on_transition(Tick(), Transition("svc", Phase.STARTING, Phase.UP, "seen"),
                          NOW_S - 0.5)
    metrics.restarted("svc", ok=True)
    records = {
        "svc": ServiceRecord(Phase.UP, since=NOW_S - 0.5, last_seen_at=NOW_S - 0.2,
                             restart_count=1),
        "spark-master": ServiceRecord(Phase.UNKNOWN, since=NOW_S - 3.0),
    }
    supervision_state = initial_state(SupervisionConfig(self_name="healthchecker-2"),
                                      NOW_S - 60.0, records)
    election = bully.ElectionState(bully.ElectionConfig(2, frozenset({1, 3})),
                                   role=bully.Role.FOLLOWER, leader_id=3, elections_started=2)
    heartbeat_server = SimpleNamespace(
        counters=Counter({"frames": 120, "lost_connections": 1, "malformed_frames": 0}),
        connection_count=5)
    transport = SimpleNamespace(dropped=Counter({"replayed": 2, "unauthenticated": 1}),
                                send_failures=3)
    return SimpleNamespace(metrics=metrics, supervision_state=supervision_state,
                           election_state=election, heartbeat_server=heartbeat_server,
                           transport=transport, clock=lambda: NOW_S)


def fake_checker_registry(node: SimpleNamespace | None = None) -> CollectorRegistry:
    return healthchecker_registry(node or checker_node())


# -- query service ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def query_service() -> SimpleNamespace:
    """Two sessions started, one done in 3 s (one failed attempt of 1 s before it)."""
    clock = FakeClock()
    metrics = JobMetrics(clock=clock)

    def failing_job():
        clock.now_s += 1.0
        raise RuntimeError("executor lost")

    def job():
        clock.now_s += 3.0
        return JobReport("c1", rows=100, valid_rows=98,
                         query_rows={"q1": 7, "q2": 2, "q3": 5, "q4": 3})

    try:
        metrics.timed_job(failing_job)
    except RuntimeError:
        pass
    metrics.timed_job(job)
    counts = {"sessions_done": 1, "sessions_given_up": 0, "records_skipped": 2,
              "records_malformed": 1, "sessions_started": 2, "sessions_picked_up": 1,
              "sessions_acked": 1, "sessions_cleaned": 1, "session_topics_deleted": 3}
    return SimpleNamespace(counts=counts, metrics=metrics, sessions_pending=2)


def fake_query_service_registry(service: SimpleNamespace | None = None) -> CollectorRegistry:
    return query_service_registry(service or query_service())
