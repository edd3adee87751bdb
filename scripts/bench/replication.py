"""Replication's price and its failover time: the library of `python -m scripts.bench_replication`
(scripts/bench_replication.py says what the rounds and the trials measure).

Owns `BenchCluster` (scripts/launcher/local_cluster.py's brokers, quiet; 1 is a lone broker),
the throughput rounds, the failover trials (the leader SIGKILLed or frozen between two
acks=all batches) and `bench` (a whole run from typed ReplicationSettings).
Invariants: the rounds interleave the clusters so the machine's noise is shared; a round starts
once the topic's leader is its group's preferred one (the leader balancer's hand-over after a
start is over) and a refusal during it (NOT_LEADER, NOT_ENOUGH_REPLICAS) is retried as a client
does -- back off (the clients' RetryPolicy), find the leader, resend from the first batch not
acknowledged -- and counted in the result (`refusals`); after each failover trial the fault is
undone (restart or thaw) and the cluster settles before the next; every broker and its
temporary data directory are gone when `bench` returns.
Threads: the caller's; every broker is a child process on 127.0.0.1.
"""

from __future__ import annotations

import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from common.kaska import Admin
from common.kaska.cluster import Cluster
from common.kaska.connection import BrokerConnection, error_from_answer
from common.kaska.errors import DuplicateSequenceError, KaskaError
from common.kaska.protocol import Api, MetadataRequest, ProduceRequest
from common.kaska.protocol.metadata import NO_LEADER
from common.kaska.protocol.produce import ACKS_ALL, ACKS_LEADER
from common.kaska.record_batch import encode_batch
from common.kaska.retry import RetryPolicy
from scripts.bench.child import cpu_s, measured
from scripts.bench.kernel_profile import KernelProfile, KernelProfiler
from scripts.bench.produce import BROKER_TIMEOUT_S, build_batches
from scripts.launcher.local_cluster import LocalCluster
from services.broker.replication.placement import group_of, preferred_leader

TOPIC = "bench"
SETTLE_TIMEOUT_S = 60.0
CLIENT_RETRY = RetryPolicy()  # the clients' default: rides out a failover
# The balancer hands a group to its preferred leader ~2 s after the start (leader_balance.py).
PREFERRED_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ReplicationSettings:
    """One run: the cluster size (odd, >= 3), the throughput rounds (`repeats` of `records`
    records; 0 repeats: none) and the failover trials (0: none)."""

    brokers: int = 3
    records: int = 1_000_000
    record_bytes: int = 100
    batch_bytes: int = 1024 * 1024
    in_flight: int = 4
    repeats: int = 5
    failovers: int = 20
    # Several producers at once, one per partition of a topic of `spread_partitions`
    # partitions (0: no such rounds): a lone broker, three brokers with one replication group
    # (one leader for all) and with one group per broker (leaders spread), side by side.
    spread_partitions: int = 6
    spread_repeats: int = 5
    # A second cluster for the failover trials, started with these broker arguments (e.g.
    # other election timeouts) and interleaved with the default one: both share the noise.
    failover_compare_args: tuple[str, ...] = ()
    # After the spread rounds, one more round per cluster under Linux perf (not counted in
    # the figures): each broker's kernel and native profile in this directory (None: none).
    perf_dir: Path | None = None


class BenchCluster(LocalCluster):
    """N brokers (scripts/launcher/local_cluster.py) in `<work>/<name>/`, quiet (WARNING) and
    without /metrics unless `extra_args` say otherwise; `size` 1 is a lone broker. Started."""

    def __init__(self, work: Path, size: int, name: str, extra_args: tuple[str, ...] = (),
                 kafka: bool = False) -> None:
        """`kafka`: each broker also listens for Kafka clients (`kafka_bootstrap`);
        `extra_args` go to every broker (e.g. the fsync policy)."""
        super().__init__(work / name, size, kafka=kafka, metrics=False,
                         extra_args=("--log-level", "WARNING", *extra_args))
        self.name = name
        self.extra_args = extra_args
        self.start()

    @property
    def ports(self) -> dict[int, int]:
        return {node: broker.port for node, broker in self.brokers.items()}

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(self.kafka_address(node) for node in self.ids)

    def agreed_leader(self, timeout_s: float = SETTLE_TIMEOUT_S) -> int:
        """The leader every running broker names (after a thaw or a restart, until the
        returning broker follows it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = {self._leader_seen_by(port) for node, port in self.ports.items()
                    if self.brokers[node].proc.poll() is None}
            if len(seen) == 1 and None not in seen:
                return seen.pop()
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: the brokers did not agree on a leader within "
                           f"{timeout_s:.0f} s")

    def leader(self, timeout_s: float = SETTLE_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node, port in self.ports.items():
                if self.brokers[node].proc.poll() is not None:
                    continue
                leader = self._leader_seen_by(port)
                if leader is not None:
                    return leader
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no leader within {timeout_s:.0f} s")

    @staticmethod
    def _leader_seen_by(port: int) -> int | None:
        leaders = _partition_leaders_seen_by(port, None, TOPIC)
        return None if leaders is None else leaders[0]

    def leader_connection(self) -> BrokerConnection:
        return BrokerConnection(("127.0.0.1", self.ports[self.leader()]),
                                request_timeout_s=BROKER_TIMEOUT_S)

    def stop(self) -> None:
        self.stop_all()
        self.close()


def create_topic(cluster: BenchCluster, partitions: int = 1) -> None:
    with Admin(cluster.bootstrap, retry=RetryPolicy(retries_max=60, backoff_s_max=0.5)) as admin:
        admin.create_topic(TOPIC, partitions)
    cluster.leader()


def settled_topic_leader(cluster: BenchCluster, timeout_s: float = PREFERRED_TIMEOUT_S) -> int:
    """The leader of TOPIC/0 once every broker names its group's preferred leader (with one
    group per broker the balancer hands the group over a few seconds after the start; a round
    timed across that hand-over would measure it). The leader every broker names if the
    preferred one does not take over within `timeout_s`."""
    size = len(cluster.ports)
    preferred = preferred_leader(group_of(TOPIC, 0, size), cluster.ports)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cluster.agreed_leader() == preferred:
            return preferred
        time.sleep(0.1)
    return cluster.agreed_leader()


def produce_retrying(connect: Callable[[], BrokerConnection], topic: str, partition: int,
                     batches: list[bytes], in_flight: int, acks: int,
                     retry: RetryPolicy = CLIENT_RETRY) -> int:
    """Send the batches in order, at most `in_flight` unanswered, as a client does: after a
    retriable refusal (NOT_LEADER, NOT_ENOUGH_REPLICAS, a broker gone) back off as the
    clients' RetryPolicy says, ask `connect` for a connection to the leader and resend from
    the first batch not acknowledged (idempotent batches: one that did land is answered as a
    duplicate). Returns how many refusals it met; raises after `retry.retries_max` of them
    or on an error that is not retriable."""
    done = refusals = 0
    connection = connect()
    try:
        while done < len(batches):
            pending: deque[Future] = deque()
            try:
                for batch in batches[done:]:
                    if len(pending) == in_flight:
                        _acknowledged(pending.popleft())
                        done += 1
                    pending.append(connection.send(Api.PRODUCE, list(
                        ProduceRequest(topic, partition, acks, batch).encode_parts())))
                while pending:
                    _acknowledged(pending.popleft())
                    done += 1
            except KaskaError as error:
                if not error.retriable or refusals >= retry.retries_max:
                    raise
                print(f"bench: {topic}/{partition}: refused after {done} of {len(batches)} "
                      f"batches ({type(error).__name__}: {error}); retrying", file=sys.stderr)
                connection.close()
                time.sleep(retry.backoff_s(refusals))
                refusals += 1
                connection = connect()
    finally:
        connection.close()
    return refusals


def throughput_round(cluster: BenchCluster, batches: list[bytes], in_flight: int,
                     acks: int) -> tuple[float, float, int]:
    """(wall seconds, the leader's CPU seconds, refusals retried) of one producer."""
    leader = settled_topic_leader(cluster)
    refusals: list[int] = []

    def connect() -> BrokerConnection:
        return BrokerConnection(("127.0.0.1", cluster.ports[cluster.leader()]),
                                request_timeout_s=BROKER_TIMEOUT_S)

    wall_s, cpu_s_used = measured(cluster.brokers[leader], lambda: refusals.append(
        produce_retrying(connect, TOPIC, 0, batches, in_flight, acks)))
    return wall_s, cpu_s_used, refusals[0]


def throughput(work: Path, args: ReplicationSettings) -> dict:
    single = BenchCluster(work, 1, "single")
    cluster = BenchCluster(work, args.brokers, "cluster")
    synced = BenchCluster(work, args.brokers, "fsync-entry", ("--replication-fsync", "entry"))
    rounds: dict[str, list[float]] = {"single": [], "cluster_acks_all": [], "cluster_acks_1": [],
                                      "cluster_acks_all_fsync_entry": []}
    refusals = dict.fromkeys(rounds, 0)

    def timed(name: str, on: BenchCluster, batches: list[bytes], acks: int) -> None:
        wall_s, _cpu_s, refused = throughput_round(on, batches, args.in_flight, acks)
        rounds[name].append(wall_s)
        refusals[name] += refused

    try:
        create_topic(single)
        create_topic(cluster)
        create_topic(synced)
        for repeat in range(args.repeats):
            # A fresh producer id per round: the broker would take the same sequences for
            # retries of the previous round's batches.
            batches = build_batches(args.records, args.record_bytes, args.batch_bytes,
                                    producer_id=repeat.to_bytes(16, "big"))
            timed("single", single, batches, ACKS_ALL)
            batches = build_batches(args.records, args.record_bytes, args.batch_bytes,
                                    producer_id=(1000 + repeat).to_bytes(16, "big"))
            timed("cluster_acks_all", cluster, batches, ACKS_ALL)
            batches = build_batches(args.records, args.record_bytes, args.batch_bytes,
                                    producer_id=(2000 + repeat).to_bytes(16, "big"))
            timed("cluster_acks_1", cluster, batches, ACKS_LEADER)
            batches = build_batches(args.records, args.record_bytes, args.batch_bytes,
                                    producer_id=(3000 + repeat).to_bytes(16, "big"))
            timed("cluster_acks_all_fsync_entry", synced, batches, ACKS_ALL)
    finally:
        single.stop()
        cluster.stop()
        synced.stop()
    payload_mb = args.records * args.record_bytes / 1e6
    ratios = [s / c for s, c in zip(rounds["single"], rounds["cluster_acks_all"], strict=True)]
    fsync_ratios = [n / e for n, e in zip(rounds["cluster_acks_all"],
                                          rounds["cluster_acks_all_fsync_entry"], strict=True)]
    return {
        "single_produce_mb_s": round(payload_mb / statistics.median(rounds["single"]), 1),
        "cluster_acks_all_produce_mb_s": round(
            payload_mb / statistics.median(rounds["cluster_acks_all"]), 1),
        "cluster_acks_1_produce_mb_s": round(
            payload_mb / statistics.median(rounds["cluster_acks_1"]), 1),
        "cluster_acks_all_vs_single": round(statistics.median(ratios), 2),
        "cluster_acks_all_vs_single_each": [round(r, 2) for r in ratios],
        "cluster_acks_all_fsync_entry_produce_mb_s": round(
            payload_mb / statistics.median(rounds["cluster_acks_all_fsync_entry"]), 1),
        "fsync_entry_vs_none": round(statistics.median(fsync_ratios), 2),
        "fsync_entry_vs_none_each": [round(r, 2) for r in fsync_ratios],
        "round_s_median": {name: round(statistics.median(times), 3)
                           for name, times in rounds.items()},
        # NOT_LEADER / NOT_ENOUGH_REPLICAS answers the producers met and retried, all repeats.
        "refusals": refusals,
    }


SPREAD_TOPIC = "spread"
# name: (brokers, broker arguments, whether the partitions' leaders must be spread)
SPREAD_CLUSTERS = {"single": (1, (), False),
                   "one_group": (3, ("--replication-groups", "1"), False),
                   "groups": (3, ("--replication-groups", "3"), True)}


def partition_leaders(cluster: BenchCluster, partitions: int, spread: bool = False,
                      timeout_s: float = SETTLE_TIMEOUT_S, topic: str = SPREAD_TOPIC
                      ) -> dict[int, int]:
    """{partition: leader} of `topic` once every broker names the same leaders and, if
    `spread`, they are all the brokers (the preferred leaders took over)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        views = [_partition_leaders_seen_by(port, partitions, topic) for node, port in
                 cluster.ports.items() if cluster.brokers[node].proc.poll() is None]
        if views and None not in views and all(view == views[0] for view in views):
            leaders = views[0]
            if not spread or len(set(leaders.values())) == min(len(cluster.ports), partitions):
                return leaders
        time.sleep(0.1)
    raise RuntimeError(f"{cluster.name}: partition leaders not settled within {timeout_s:.0f} s")


def _partition_leaders_seen_by(port: int, partitions: int | None, topic: str
                               ) -> dict[int, int] | None:
    """{partition: leader} of `topic` as the broker on `port` names them; None when it does
    not answer, lacks the topic (or `partitions` of it) or names no leader for one."""
    try:
        connection = BrokerConnection(("127.0.0.1", port), request_timeout_s=2.0,
                                      connect_timeout_s=1.0)
    except KaskaError:
        return None
    try:
        response = connection.request(MetadataRequest((topic,)))
    except KaskaError:
        return None
    finally:
        connection.close()
    infos = response.topics.get(topic)
    if not infos or partitions not in (None, len(infos)) \
            or any(i.leader_id == NO_LEADER for i in infos):
        return None
    return {info.partition: info.leader_id for info in infos}


def spread_round(cluster: BenchCluster, batches: dict[int, list[bytes]], in_flight: int,
                 spread: bool) -> tuple[float, list[float], int, int]:
    """(wall seconds, each broker's CPU seconds, leadership moves logged meanwhile, refusals
    retried) for one producer per partition at once, each on its own connection to its
    partition's leader, acks=all; after a refusal (an election, a hand-over to the preferred
    leader) it goes on at the partition's new leader (`produce_retrying`)."""
    leaders = partition_leaders(cluster, len(batches), spread)
    connections = {p: BrokerConnection(("127.0.0.1", cluster.ports[leaders[p]]),
                                       request_timeout_s=BROKER_TIMEOUT_S) for p in batches}
    errors: list[Exception] = []
    refusals: dict[int, int] = {}

    def one(partition: int) -> None:
        made_ahead = [connections[partition]]  # made before the clock started

        def connect() -> BrokerConnection:
            if made_ahead:
                return made_ahead.pop()
            leader = partition_leaders(cluster, len(batches))[partition]
            return BrokerConnection(("127.0.0.1", cluster.ports[leader]),
                                    request_timeout_s=BROKER_TIMEOUT_S)

        try:
            refusals[partition] = produce_retrying(connect, SPREAD_TOPIC, partition,
                                                   batches[partition], in_flight, ACKS_ALL)
        except (KaskaError, OSError, RuntimeError) as error:  # the caller raises it
            errors.append(error)

    pids = [child.proc.pid for child in cluster.brokers.values()]
    cpu_before = [cpu_s(pid) for pid in pids]
    threads = [threading.Thread(target=one, args=(p,)) for p in batches]
    moves_before = leader_moves(cluster)
    started = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for connection in connections.values():
            connection.close()
    wall_s = time.monotonic() - started
    if errors:
        raise errors[0]
    moved = leader_moves(cluster) - moves_before
    return wall_s, [cpu_s(pid) - before for pid, before in zip(pids, cpu_before, strict=True)], \
        moved, sum(refusals.values())


def _acknowledged(answer: Future) -> None:
    code, body = answer.result(BROKER_TIMEOUT_S)
    if code:
        raise error_from_answer(code, body)


def leader_moves(cluster: BenchCluster) -> int:
    """Elections won and leaderships taken over, all groups of all brokers (their logs)."""
    moves = 0
    for node in cluster.ports:
        path = cluster.work / f"{cluster.name}-{node}.log"
        if path.exists():
            moves += path.read_text(errors="replace").count(" leader of epoch ")
    return moves


def spread(work: Path, args: ReplicationSettings) -> dict:
    """Producers on every partition at once: a lone broker, one group, a group per broker."""
    # INFO: the role lines count the leadership moves during the rounds.
    clusters = {name: BenchCluster(work, size, f"spread-{name}", (*extra, "--log-level", "INFO"))
                for name, (size, extra, _spread) in SPREAD_CLUSTERS.items()}
    walls: dict[str, list[float]] = {name: [] for name in clusters}
    cpus: dict[str, list[list[float]]] = {name: [] for name in clusters}
    moves = dict.fromkeys(clusters, 0)
    refusals = dict.fromkeys(clusters, 0)
    per_partition = args.records // args.spread_partitions
    try:
        for cluster in clusters.values():
            with Admin(cluster.bootstrap,
                       retry=RetryPolicy(retries_max=60, backoff_s_max=0.5)) as admin:
                admin.create_topic(SPREAD_TOPIC, args.spread_partitions)
        leaders = {name: partition_leaders(cluster, args.spread_partitions,
                                           SPREAD_CLUSTERS[name][2])
                   for name, cluster in clusters.items()}
        for repeat in range(args.spread_repeats):
            for c, (name, cluster) in enumerate(clusters.items()):
                batches = {p: build_batches(per_partition, args.record_bytes, args.batch_bytes,
                                            producer_id=(7000 + 100 * repeat + 10 * c + p
                                                         ).to_bytes(16, "big"))
                           for p in range(args.spread_partitions)}
                wall_s, cpu, moved, refused = spread_round(cluster, batches, args.in_flight,
                                                           SPREAD_CLUSTERS[name][2])
                walls[name].append(wall_s)
                cpus[name].append(cpu)
                moves[name] += moved
                refusals[name] += refused
        profiles = profiled_rounds(clusters, args, per_partition) if args.perf_dir else {}
    finally:
        for cluster in clusters.values():
            cluster.stop()
    payload_mb = per_partition * args.spread_partitions * args.record_bytes / 1e6
    result: dict = {"spread_partitions": args.spread_partitions,
                    "spread_leaders": {name: sorted(set(found.values()))
                                       for name, found in leaders.items()}}
    for name in clusters:
        result[f"spread_{name}_produce_mb_s"] = round(
            payload_mb / statistics.median(walls[name]), 1)
        # Each broker's CPU per round (median per broker), and the busiest broker's share:
        # on machines of their own, the busiest broker bounds the cluster.
        each = [statistics.median(round_cpus[b] for round_cpus in cpus[name])
                for b in range(len(cpus[name][0]))]
        result[f"spread_{name}_broker_cpu_s_median"] = round(sum(each), 2)
        result[f"spread_{name}_broker_cpu_s_each"] = [round(c, 2) for c in each]
        result[f"spread_{name}_busiest_broker_mb_per_cpu_s"] = round(payload_mb / max(each), 1)
        result[f"spread_{name}_leader_moves_during_rounds"] = moves[name]
        result[f"spread_{name}_refusals"] = refusals[name]
    for name in ("one_group", "groups"):
        ratios = [s / c for s, c in zip(walls["single"], walls[name], strict=True)]
        result[f"spread_{name}_vs_single"] = round(statistics.median(ratios), 2)
        result[f"spread_{name}_vs_single_each"] = [round(r, 2) for r in ratios]
    if profiles:
        result["spread_kernel_profiles"] = {name: profile.as_json()
                                            for name, profile in profiles.items()}
    return result


def profiled_rounds(clusters: dict[str, BenchCluster], args: ReplicationSettings,
                    per_partition: int) -> dict[str, KernelProfile]:
    """One more spread round per cluster with every broker under `perf record`; prints each
    broker's summary line (its role: lone, leader of the partitions, or follower) as it goes."""
    profiles: dict[str, KernelProfile] = {}
    for c, (name, cluster) in enumerate(clusters.items()):
        spread_leaders = SPREAD_CLUSTERS[name][2]
        leaders = set(partition_leaders(cluster, args.spread_partitions,
                                        spread_leaders).values())
        batches = {p: build_batches(per_partition, args.record_bytes, args.batch_bytes,
                                    producer_id=(8000 + 10 * c + p).to_bytes(16, "big"))
                   for p in range(args.spread_partitions)}
        profiler = KernelProfiler(args.perf_dir)
        for node, child in cluster.brokers.items():
            role = "lone" if len(cluster.brokers) == 1 else \
                "leader" if node in leaders else "follower"
            profiler.start(f"{name}-broker-{node}-{role}", child.proc.pid)
        try:
            spread_round(cluster, batches, args.in_flight, spread_leaders)
        finally:
            found = profiler.stop()
        for profile in found:
            print(profile.line(), file=sys.stderr, flush=True)
            profiles[profile.name] = profile
    return profiles


FAILOVER_PARTITIONS = 3  # partition 0 is the one whose leader is hit


class SparedProducer:
    """While a trial runs: acks=all produces, one after another, to every partition of the
    topic its leader does not lead (other replication groups: none with one group); the
    longest wait for an acknowledgement is how long they stalled."""

    def __init__(self, cluster: BenchCluster, partitions: list[int], producer_id: bytes) -> None:
        self._client = Cluster(cluster.bootstrap)
        self._partitions = partitions
        self._producer_id = producer_id
        self._stop = threading.Event()
        self.longest_s = 0.0
        self.acks = 0
        self.error: KaskaError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SparedProducer:
        if self._partitions:
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._client.close()

    def _run(self) -> None:
        sequence = 0
        try:
            while not self._stop.is_set():
                for partition in self._partitions:
                    batch = encode_batch([b"s" * 100], producer_id=self._producer_id,
                                         sequence=sequence)
                    started = time.monotonic()
                    self._client.call(ProduceRequest(TOPIC, partition, ACKS_ALL, batch),
                                      route=(TOPIC, partition),
                                      ok_after_delivery=(DuplicateSequenceError,))
                    self.longest_s = max(self.longest_s, time.monotonic() - started)
                    self.acks += 1
                sequence += 1
        except KaskaError as error:  # the trial raises it
            self.error = error


def failover_trial(cluster: BenchCluster, producer_id: bytes, fault: signal.Signals
                   ) -> tuple[float, float | None]:
    """Freeze (SIGSTOP), kill (SIGKILL) or stop (SIGTERM) the leader between two produces of a
    client with the default settings (30 s request timeout, default retries); seconds from the
    fault to the next acknowledged produce, necessarily on a new leader. A frozen leader still
    accepts the connection, so the produce waits there until the client's leader probe hears
    of the successor (common/kaska/cluster.py); a stopped one hands leadership over first
    (`--shutdown-handover-ms`) and serves until then, so for it the trial is the longest of
    the produces sent one after another until it has exited, and one more. The broker is
    thawed, or restarted, and the cluster settled, before the next trial."""
    leaders = settled_leaders(cluster)
    leader = leaders[0]
    spared = [p for p, other in leaders.items() if other != leader]
    client = Cluster(cluster.bootstrap)
    sequence = 0

    def send_one() -> None:
        nonlocal sequence
        batch = encode_batch([b"x" * 100], producer_id=producer_id, sequence=sequence)
        client.call(ProduceRequest(TOPIC, 0, ACKS_ALL, batch), route=(TOPIC, 0),
                    ok_after_delivery=(DuplicateSequenceError,))
        sequence += 1

    proc = cluster.brokers[leader].proc
    spared_id = bytes(reversed(producer_id))
    try:
        send_one()  # the cluster answers before the fault
        with SparedProducer(cluster, spared, spared_id) as others:
            proc.send_signal(fault)
            faulted_at = time.monotonic()
            send_one()
            took_s = time.monotonic() - faulted_at
            # A stopped leader serves on until it hands over (the signal is handled later):
            # the stall is the longest produce among those sent until it has exited, and one
            # more.
            while fault == signal.SIGTERM and proc.poll() is None:
                sent_at = time.monotonic()
                send_one()
                took_s = max(took_s, time.monotonic() - sent_at)
            if fault == signal.SIGTERM:
                sent_at = time.monotonic()
                send_one()
                took_s = max(took_s, time.monotonic() - sent_at)
        if others.error is not None:
            raise others.error
        assert not spared or others.acks > 0, "the spared partitions' producer never ran"
    finally:
        client.close()
        if fault == signal.SIGSTOP:
            proc.send_signal(signal.SIGCONT)
    if fault in (signal.SIGKILL, signal.SIGTERM):
        cluster.brokers[leader].wait_exit()
        cluster.start_broker(leader)
    settled_leaders(cluster)
    return took_s, (others.longest_s if spared else None)


def settled_leaders(cluster: BenchCluster) -> dict[int, int]:
    """{partition: leader} of the failover topic once every broker agrees, and with several
    groups once every group is back with its preferred leader (a returning broker is handed its
    group: a trial must not overlap that hand-over)."""
    spread = "--replication-groups" not in cluster.extra_args
    return partition_leaders(cluster, FAILOVER_PARTITIONS, spread=spread, topic=TOPIC)


# "stop": SIGTERM, a graceful stop: the leader hands leadership over first.
FAULTS = {"kill": signal.SIGKILL, "freeze": signal.SIGSTOP, "stop": signal.SIGTERM}


def failover(work: Path, trials: int, brokers: int,
             compare_args: tuple[str, ...] = ()) -> dict:
    """`trials` of each fault on the leader, interleaved, so all share the machine's noise;
    with `compare_args`, a second cluster started with them takes every trial right after the
    default one (its figures are prefixed `compare_`)."""
    clusters = {"": BenchCluster(work, brokers, "failover")}
    if compare_args:
        clusters["compare_"] = BenchCluster(work, brokers, "failover-compare", compare_args)
    times = {(prefix, name): [] for prefix in clusters for name in FAULTS}
    spared = {(prefix, name): [] for prefix in clusters for name in FAULTS}
    try:
        for cluster in clusters.values():
            create_topic(cluster, FAILOVER_PARTITIONS)
        for trial in range(trials):
            for k, (name, fault) in enumerate(FAULTS.items()):
                for c, (prefix, cluster) in enumerate(clusters.items()):
                    producer_id = (5000 + 2 * (len(FAULTS) * trial + k) + c).to_bytes(16, "big")
                    took_s, spared_s = failover_trial(cluster, producer_id, fault)
                    times[prefix, name].append(took_s)
                    if spared_s is not None:
                        spared[prefix, name].append(spared_s)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    result: dict = {"failover_trials": trials}
    if compare_args:
        result["compare_broker_args"] = list(compare_args)
    for (prefix, name), each in times.items():
        result |= {f"{prefix}leader_{name}_s_median": round(statistics.median(each), 2),
                   f"{prefix}leader_{name}_s_max": round(max(each), 2),
                   f"{prefix}leader_{name}_s_each": [round(t, 2) for t in each]}
        if spared[prefix, name]:
            # The partitions of the other groups: their longest produce during the trial.
            result[f"{prefix}spared_{name}_longest_produce_s_max"] = round(
                max(spared[prefix, name]), 3)
            result[f"{prefix}spared_{name}_longest_produce_s_median"] = round(
                statistics.median(spared[prefix, name]), 3)
    return result


def bench(settings: ReplicationSettings) -> dict:
    """The throughput rounds and the failover trials the settings ask for, as one JSON-ready
    dict; every broker and its data directory are gone when it returns."""
    work = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    try:
        result = {"brokers": settings.brokers, "records": settings.records,
                  "record_bytes": settings.record_bytes, "repeats": settings.repeats}
        if settings.repeats:
            result |= throughput(work, settings)
        if settings.spread_partitions and settings.spread_repeats:
            result |= spread(work, settings)
        if settings.failovers:
            result |= failover(work, settings.failovers, settings.brokers,
                               settings.failover_compare_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result
