"""The broker's Prometheus metrics: plain counters fed by the request path, and a collector that
reads them and the broker's live state (partitions, replication) at scrape time.

Counting stays off the storage: `BrokerCounters` takes one lock per answered request (a few
integer adds), the replica manager adds each leader append, the fetch handlers say how many
records their answer carries. Everything else (offsets, high watermarks, the Raft state, the
replication counters) already exists and is only read when Prometheus scrapes, from the
scrape's thread: the partitions' offsets and the Raft state are immutable snapshots or single
reads, so a scrape never takes a partition lock or blocks a produce.

Metric families (names: `kaska_` prefix, `_total` counters, base units):
- traffic: `kaska_requests_total{api,code,error}`, `kaska_kafka_requests_total{api,outcome}`
  (the Kafka listener's); in: `kaska_produced_bytes_total`,
  `kaska_produced_records_total` (client batches this broker appended as leader, retries that
  were dropped as duplicates not counted, internal topics not counted); out:
  `kaska_fetched_bytes_total{api}` and `kaska_fetched_records_total{api}` (record batches sent
  by FETCH to consumers and by REPLICA_FETCH to followers); `kaska_connections`;
  latency: `kaska_request_duration_seconds{listener,api}` (histogram, request_durations.py);
- consumers: `kaska_consumergroup_lag{group,topic,partition}` (high watermark minus committed
  offset, on the partition's leader only: consumer_lag.py);
- listeners: `kaska_listener_connections{listener}` (open now: kaska, and kafka-<NAME> for each
  named Kafka listener, e.g. kafka-INTERNAL) and
  `kaska_listener_connections_refused_total{listener,reason}` (closed unserved,
  network/acceptor.py: `full` at `--connections-max`, `stopping` during shutdown);
- partitions: `kaska_partition_log_start_offset` (what consumers may read from: the first
  segment's base, or where DELETE_RECORDS moved it), `kaska_partition_log_end_offset`,
  `kaska_partition_high_watermark`, `kaska_partition_size_bytes` (labels topic, partition);
- storage: `kaska_storage_full` (1 during a full-disk episode),
  `kaska_storage_refused_writes_total`, `kaska_storage_full_episodes_total` (disk_space.py),
  `kaska_disk_free_bytes` (statvfs of the data directory at scrape time; absent when unreadable);
- replication, each labelled with its replication `group` (replication/placement.py):
  `kaska_replication_role{group,role}` (1 for the current role), `_epoch`, `_leader_id`
  (-1: none known), `_lease_held` (1 while it leads with its leader lease), `_commit_index`,
  `_journal_end_index`, and on the group's leader, per follower,
  `kaska_replication_follower_match_index`, `_follower_lag_entries` (journal entries the
  follower does not have yet) and `_follower_last_fetch_age_seconds`; the group's health:
  `kaska_replication_group_voters` (its configured voters: each partition's replicas),
  `kaska_replication_in_sync_replicas` (on its leader only: the voters caught up to the
  leader's journal end within the last few seconds, replication/in_sync.py) and
  `kaska_under_replicated_partitions` (the group's partitions this broker leads while not all
  its voters are in sync; 0 elsewhere, so the sum over the brokers is the cluster's); counters
  `kaska_replication_elections_won_total`, `_truncations_total`, `_entries_applied_total`,
  `_stale_divergences_total` (a leader's DIVERGING answer below this broker's commit index:
  nothing truncated; logged too), `_requests_refused_total{reason}`,
  `_leadership_transfers_total{outcome}` (handed_over, abandoned, stood),
  `_followers_stalled_total` (on a leader: a follower that makes no progress while the
  leader has entries for it, once per episode; follower_progress.py),
  `kaska_replication_deleted_records_total` (offsets committed DELETE_RECORDS entries moved
  below this broker's log starts: every replica counts its own), and
  `kaska_leader_lease_refusals_total` (requests refused as leader for lack of a lease);
- peer frames: `kaska_peer_frames_refused_total{direction,reason}` (network/peer_gate.py: a peer's
  request or answer that failed its signature, freshness, binding or range checks, or a frame
  of this broker's own that could not be encoded).
Partition labels follow the topics (one per session and kind): a deleted topic's series
disappear with it, so the count stays what the broker holds.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.kaska.errors import KaskaError, UnknownTopicOrPartitionError
from common.kaska.protocol.frames import Api
from services.broker.consumer_lag import consumer_lag_family
from services.broker.replication.in_sync import REPLICA_LAG_TIME_MAX_S, in_sync_replicas
from services.broker.replication.placement import group_of
from services.broker.replication.raft import Role, holds_lease
from services.broker.request_durations import KAFKA_LISTENER, KASKA_LISTENER, RequestDurations

NO_LEADER_ID = -1
UNKNOWN_API = "unknown"  # an api number the broker does not serve: one label, not 65536
# The header fields a record count needs: batch_length (after 8 bytes of base offset) and
# record_count (24 bytes in); see common/kaska/record_batch.py.
_LENGTH_AND_COUNT = struct.Struct(">8xI12xI")
_LENGTH_FIELD_END = 12


def api_label(api: int) -> str:
    try:
        return Api(api).name.lower()
    except ValueError:
        return UNKNOWN_API


def records_in_slices(slices: Iterable) -> int:
    """Records in the whole batches of `slices` (storage FileSlices), from their headers.

    One 28-byte pread per batch, from the page cache the sendfile reads anyway: the broker
    still never parses a record. A slice cut short by a truncation counts what it still holds
    (the send stops there too)."""
    records = 0
    for piece in slices:
        position, end = piece.position, piece.position + piece.nbytes
        while position + _LENGTH_AND_COUNT.size <= end:
            head = os.pread(piece.fd, _LENGTH_AND_COUNT.size, position)
            if len(head) < _LENGTH_AND_COUNT.size:
                break
            batch_length, record_count = _LENGTH_AND_COUNT.unpack(head)
            records += record_count
            position += _LENGTH_FIELD_END + batch_length
    return records


@dataclass(frozen=True, slots=True)
class TrafficSnapshot:
    requests: dict[tuple[str, str, str], int]  # (api, code, error name) -> answers
    bytes_in: int
    records_in: int
    bytes_out: dict[str, int]  # api -> record batch bytes sent
    records_out: dict[str, int]
    kafka_requests: dict[tuple[str, str], int]  # (Kafka api name, outcome) -> answers


class BrokerCounters:
    """Requests answered, bytes and records in and out. Thread-safe: connection threads, the
    deferred-reply threads and the replica manager add; the scrape thread snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str, str]] = Counter()
        self._bytes_in = 0
        self._records_in = 0
        self._bytes_out: Counter[str] = Counter()
        self._records_out: Counter[str] = Counter()
        self._lease_refusals = 0
        self._kafka_requests: Counter[tuple[str, str]] = Counter()
        self.durations = RequestDurations()  # its own lock: observed beside the counts

    def answered(self, api: int, error: KaskaError | None, reply=None,
                 took_s: float | None = None) -> None:
        """One request answered: with `error`, or with `reply` (a
        services.broker.network.reply.Reply that went out whole; its slices are record
        batches), `took_s` after its header was read (None: not timed)."""
        name = api_label(api)
        if took_s is not None:
            self.durations.observe(KASKA_LISTENER, name, took_s)
        key = (name, "0", "none") if error is None else (
            name, str(error.code), type(error).__name__)
        sent_bytes = sum(piece.nbytes for piece in reply.slices) if reply is not None else 0
        sent_records = reply.records if reply is not None else 0
        with self._lock:
            self._requests[key] += 1
            if sent_bytes:
                self._bytes_out[name] += sent_bytes
                self._records_out[name] += sent_records

    def kafka_answered(self, api: str, outcome: str, took_s: float | None = None) -> None:
        """One request of the Kafka listener answered (kafka/requests.py): `outcome` is ok,
        unsupported_version, invalid_request, a refusal's KaskaError class, or internal_error;
        its answer was ready `took_s` after the request was read (None: not timed)."""
        if took_s is not None:
            self.durations.observe(KAFKA_LISTENER, api, took_s)
        with self._lock:
            self._kafka_requests[(api, outcome)] += 1

    def appended(self, batch_bytes: int, records: int) -> None:
        """A client batch appended by this broker as leader (not a dropped duplicate)."""
        with self._lock:
            self._bytes_in += batch_bytes
            self._records_in += records

    def lease_refused(self) -> None:
        """A request refused (NOT_LEADER, or a METADATA naming no leader) because this broker
        leads without its lease (cluster/replica_manager.py)."""
        with self._lock:
            self._lease_refusals += 1

    @property
    def lease_refusals(self) -> int:
        with self._lock:
            return self._lease_refusals

    def snapshot(self) -> TrafficSnapshot:
        with self._lock:
            return TrafficSnapshot(dict(self._requests), self._bytes_in, self._records_in,
                                   dict(self._bytes_out), dict(self._records_out),
                                   dict(self._kafka_requests))


class BrokerCollector(Collector):
    """Reads the broker at scrape time. `partitions` is the PartitionTable
    (cluster/partition_table.py: topics(), get(), space), `groups` the ReplicationGroups
    (replication_nodes()), `connections` the open count."""

    def __init__(self, counters: BrokerCounters, partitions, groups,
                 connections: Callable[[], int] = lambda: 0,
                 clock: Callable[[], float] = time.monotonic,
                 peer_refusals=None,
                 listeners: Callable[[], Iterable] = tuple,
                 offsets=None) -> None:
        """`peer_refusals`: the PeerRefusals of network/peer_gate.py (absent: none counted);
        `listeners`: the acceptors (network/acceptor.py: `name`, `connection_count`,
        `refusals()`); `offsets`: the CommittedOffsets (cluster/committed_offsets.py: its
        `all_committed()`) that consumer lag is read from (absent: no lag reported)."""
        self._offsets = offsets
        self._counters = counters
        self._listeners = listeners
        self._peer_refusals = peer_refusals
        self._partition_table = partitions
        self._groups = groups
        self._connections = connections
        self._clock = clock  # the replication node's clock: follower fetch times are on it

    def collect(self) -> Iterator[Metric]:
        yield from self._traffic()
        yield from self._partitions()
        yield from self._storage()
        yield from self._replication()
        yield self._peer_frames()
        if self._offsets is not None:
            yield consumer_lag_family(self._offsets.all_committed(),
                                      self._leader_high_watermark)

    def _leader_high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark where this broker leads it (with its lease), else
        None (consumer_lag.py)."""
        if not self._groups.role(topic, partition).is_leader:
            return None
        try:
            return self._partition_table.get(topic, partition).high_watermark()
        except UnknownTopicOrPartitionError:
            return None  # deleted, or a commit naming a partition the topic does not have

    def _peer_frames(self) -> Metric:
        refused = CounterMetricFamily(
            "kaska_peer_frames_refused", "Broker-to-broker frames refused before use, by "
            "direction (request, answer, outgoing) and reason (unauthenticated, replayed, "
            "impostor, out_of_range, ...).", labels=["direction", "reason"])
        counts = self._peer_refusals.snapshot() if self._peer_refusals is not None else {}
        for (direction, reason), value in sorted(counts.items()):
            refused.add_metric([direction, reason], value)
        return refused

    # -- traffic -------------------------------------------------------------------------------

    def _traffic(self) -> Iterator[Metric]:
        counts = self._counters.snapshot()
        requests = CounterMetricFamily(
            "kaska_requests", "Requests answered, by api and error code (0, none: success).",
            labels=["api", "code", "error"])
        for (api, code, error), value in sorted(counts.requests.items()):
            requests.add_metric([api, code, error], value)
        yield requests
        kafka = CounterMetricFamily(
            "kaska_kafka_requests", "Requests of the Kafka listener answered, by api and outcome "
            "(ok, unsupported_version, invalid_request, a refusal's error, internal_error).",
            labels=["api", "outcome"])
        for (api, outcome), value in sorted(counts.kafka_requests.items()):
            kafka.add_metric([api, outcome], value)
        yield kafka
        yield CounterMetricFamily(
            "kaska_produced_bytes", "Bytes of client record batches appended as leader (duplicates "
            "and internal topics not counted).", value=counts.bytes_in)
        yield CounterMetricFamily(
            "kaska_produced_records", "Records of client batches appended as leader "
            "(duplicates and internal topics not counted).", value=counts.records_in)
        bytes_out = CounterMetricFamily(
            "kaska_fetched_bytes", "Bytes of record batches sent, by api (fetch: consumers, "
            "replica_fetch: followers).", labels=["api"])
        records_out = CounterMetricFamily(
            "kaska_fetched_records", "Records in the batches sent, by api.", labels=["api"])
        for api in sorted(counts.bytes_out):
            bytes_out.add_metric([api], counts.bytes_out[api])
            records_out.add_metric([api], counts.records_out.get(api, 0))
        yield bytes_out
        yield records_out
        yield self._counters.durations.family()
        yield GaugeMetricFamily("kaska_connections", "Client and peer connections open.",
                                value=self._connections())
        yield from self._listener_families()

    def _listener_families(self) -> Iterator[Metric]:
        open_now = GaugeMetricFamily("kaska_listener_connections", "Connections open, by "
                                     "listener (kaska, kafka-<NAME>).", labels=["listener"])
        refused = CounterMetricFamily(
            "kaska_listener_connections_refused", "Connections closed unserved, by listener "
            "and reason (full: --connections-max reached; stopping: shutdown under way).",
            labels=["listener", "reason"])
        for listener in self._listeners():
            open_now.add_metric([listener.name], listener.connection_count)
            for reason, value in sorted(listener.refusals().items()):
                refused.add_metric([listener.name, reason], value)
        yield open_now
        yield refused

    # -- storage -------------------------------------------------------------------------------

    def _storage(self) -> Iterator[Metric]:
        space = self._partition_table.space  # storage/disk_space.py
        yield GaugeMetricFamily("kaska_storage_full", "1 while writes are refused for lack of "
                                "disk space (a full-disk episode).", value=int(space.full))
        yield CounterMetricFamily("kaska_storage_refused_writes", "Writes refused for lack of "
                                  "disk space (answered KAFKA_STORAGE_ERROR).",
                                  value=space.refusals)
        yield CounterMetricFamily("kaska_storage_full_episodes", "Full-disk episodes.",
                                  value=space.episodes)
        free_bytes = space.free_bytes()
        if free_bytes is not None:
            yield GaugeMetricFamily("kaska_disk_free_bytes", "Bytes still free for the broker on "
                                    "its data directory's file system.", value=free_bytes)

    # -- partitions ----------------------------------------------------------------------------

    def _partitions(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        start = GaugeMetricFamily("kaska_partition_log_start_offset",
                                  "First offset consumers may read (retention and "
                                  "DeleteRecords move it up).", labels=labels)
        end = GaugeMetricFamily("kaska_partition_log_end_offset",
                                "Next offset to assign in this broker's log.", labels=labels)
        high = GaugeMetricFamily("kaska_partition_high_watermark",
                                 "End of what consumers may read: committed on a majority.",
                                 labels=labels)
        size = GaugeMetricFamily("kaska_partition_size_bytes", "Bytes in the partition's "
                                 "segments.", labels=labels)
        for topic, count in sorted(self._partition_table.topics().items()):
            for number in range(count):
                try:
                    partition = self._partition_table.get(topic, number)
                except UnknownTopicOrPartitionError:
                    continue  # deleted between the two reads
                values = [topic, str(number)]
                start.add_metric(values, partition.log.log_start_offset)
                end.add_metric(values, partition.log.log_end_offset)
                high.add_metric(values, partition.high_watermark())
                size.add_metric(values, partition.log.size_bytes)
        yield from (start, end, high, size)

    # -- replication ---------------------------------------------------------------------------

    def _replication(self) -> Iterator[Metric]:
        groups = list(self._groups.replication_nodes())
        labels = ["group"]
        role = GaugeMetricFamily("kaska_replication_role", "1 for this broker's current Raft "
                                 "role in the group.", labels=["group", "role"])
        epoch = GaugeMetricFamily("kaska_replication_epoch", "Current leader epoch (Raft "
                                  "term) of the group.", labels=labels)
        leader = GaugeMetricFamily("kaska_replication_leader_id", "Node id of the group's "
                                   "leader this broker knows, -1: none.", labels=labels)
        voter = GaugeMetricFamily(
            "kaska_replication_voter", "1: this broker votes in the group; 0: a learner, "
            "rejoining with a new data directory until it has caught up (docs/replication.md).",
            labels=labels)
        lease = GaugeMetricFamily("kaska_replication_lease_held",
                                  "1 while this broker leads the group with a leader lease "
                                  "(answers reads and takes writes).", labels=labels)
        commit = GaugeMetricFamily("kaska_replication_commit_index",
                                   "Journal entries committed (on a majority).", labels=labels)
        end = GaugeMetricFamily("kaska_replication_journal_end_index",
                                "Journal entries held by this broker.", labels=labels)
        followers = _FollowerFamilies()
        in_sync = _InSyncFamilies()
        partitions = _partitions_per_group(self._partition_table.topics(), len(groups))
        counters = _ReplicationCounterFamilies()
        for number, node in groups:
            state = node.state  # one immutable snapshot: every value below agrees with the others
            group = str(number)
            for candidate in Role:
                role.add_metric([group, candidate.value], 1 if state.role is candidate else 0)
            epoch.add_metric([group], state.epoch)
            leader.add_metric([group], NO_LEADER_ID if state.leader_id is None
                              else state.leader_id)
            voter.add_metric([group], 0 if state.learner else 1)
            lease.add_metric([group], int(holds_lease(node.raft_config, state, self._clock())))
            commit.add_metric([group], state.commit)
            end.add_metric([group], state.log.end)
            followers.add(group, node, state, self._clock())
            in_sync.add(group, node, state, self._clock(), partitions.get(number, 0))
            counters.add(group, node.counters)
        yield from (role, epoch, leader, voter, lease)
        yield CounterMetricFamily("kaska_leader_lease_refusals",
                                  "Requests this broker refused as leader for lack of a lease "
                                  "(NOT_LEADER, or METADATA naming no leader).",
                                  value=self._counters.lease_refusals)
        yield from (commit, end)
        yield from followers.families()
        yield from in_sync.families()
        yield from counters.families()


def _partitions_per_group(topics: dict[str, int], groups: int) -> Counter[int]:
    """group -> the partitions it replicates, of the topics this broker knows."""
    counts: Counter[int] = Counter()
    for topic, count in topics.items():
        for partition in range(count):
            counts[group_of(topic, partition, groups)] += 1
    return counts


class _InSyncFamilies:
    """A group's in-sync replicas, as only its leader knows them (replication/in_sync.py)."""

    def __init__(self) -> None:
        labels = ["group"]
        self.voters = GaugeMetricFamily(
            "kaska_replication_group_voters", "Voters the group is configured with, learners "
            "included: the replicas each of its partitions has.", labels=labels)
        self.in_sync = GaugeMetricFamily(
            "kaska_replication_in_sync_replicas",
            "Replicas of the group that caught up to its leader's journal end within the last "
            f"{REPLICA_LAG_TIME_MAX_S:g} s, the leader included, learners never. Only the "
            "group's leader reports it (no other broker can know).", labels=labels)
        self.under_replicated = GaugeMetricFamily(
            "kaska_under_replicated_partitions",
            "Partitions of the group that this broker leads while fewer of the group's voters "
            "than all are in sync (0 where it does not lead).", labels=labels)

    def add(self, group: str, node, state, now: float, partitions: int) -> None:
        voters = node.raft_config.voters
        self.voters.add_metric([group], len(voters))
        in_sync = in_sync_replicas(node.raft_config, state, now)
        if in_sync is None:
            self.under_replicated.add_metric([group], 0)
            return
        self.in_sync.add_metric([group], len(in_sync))
        self.under_replicated.add_metric([group], partitions if in_sync < voters else 0)

    def families(self) -> tuple[Metric, ...]:
        return self.voters, self.in_sync, self.under_replicated


class _FollowerFamilies:
    """What a group's leader knows of each follower."""

    def __init__(self) -> None:
        labels = ["group", "follower"]
        self.match = GaugeMetricFamily("kaska_replication_follower_match_index",
                                       "Journal entries the leader knows the follower holds.",
                                       labels=labels)
        self.lag = GaugeMetricFamily("kaska_replication_follower_lag_entries",
                                     "Journal entries the follower does not hold yet.",
                                     labels=labels)
        self.age = GaugeMetricFamily("kaska_replication_follower_last_fetch_age_seconds",
                                     "Seconds since the follower's last fetch.", labels=labels)

    def add(self, group: str, node, state, now: float) -> None:
        if state.role is not Role.LEADER:
            return
        for follower in sorted(node.raft_config.peers):
            values = [group, str(follower)]
            held = state.match.get(follower, 0)
            self.match.add_metric(values, held)
            self.lag.add_metric(values, max(state.log.end - held, 0))
            fetched_at = state.last_fetch_s.get(follower)
            if fetched_at is not None:
                self.age.add_metric(values, max(now - fetched_at, 0.0))

    def families(self) -> tuple[Metric, ...]:
        return self.match, self.lag, self.age


class _ReplicationCounterFamilies:
    """Each group's ReplicationCounters."""

    def __init__(self) -> None:
        labels = ["group"]
        self.elections = CounterMetricFamily("kaska_replication_elections_won",
                                             "Elections this broker won.", labels=labels)
        self.truncations = CounterMetricFamily("kaska_replication_truncations",
                                               "Journal truncations to match a new leader.",
                                               labels=labels)
        self.applied = CounterMetricFamily("kaska_replication_entries_applied",
                                           "Journal entries applied from the leader.",
                                           labels=labels)
        self.divergences = CounterMetricFamily(
            "kaska_replication_stale_divergences", "Divergences a leader reported below this "
            "broker's commit index (nothing truncated).", labels=labels)
        self.refused = CounterMetricFamily("kaska_replication_requests_refused",
                                           "Peer requests refused.", labels=["group", "reason"])
        self.transfers = CounterMetricFamily(
            "kaska_replication_leadership_transfers",
            "Leadership transfers (a SIGTERMed leader's hand-over, or a hand-over to the "
            "group's preferred leader): handed_over (this leader told its target to stand and "
            "stepped down), abandoned (its target stayed silent or behind: it led on), stood "
            "(this broker stood on a TIMEOUT_NOW).", labels=["group", "outcome"])
        self.incarnations = CounterMetricFamily(
            "kaska_replication_peer_incarnation_changes", "Followers that came back with "
            "another data directory (their match index reset).", labels=labels)
        self.deleted_records = CounterMetricFamily(
            "kaska_replication_deleted_records", "Records (offsets) committed DeleteRecords "
            "moved below this broker's partition log starts.", labels=labels)
        self.stalled = CounterMetricFamily(
            "kaska_replication_followers_stalled", "Episodes of a follower that fetched from "
            "one journal end while this leader held entries past it, for long enough to be "
            "reported (each counted and logged once).", labels=labels)

    def add(self, group: str, counters) -> None:
        self.elections.add_metric([group], counters.elections_won)
        self.truncations.add_metric([group], counters.truncations)
        self.applied.add_metric([group], counters.entries_applied)
        self.divergences.add_metric([group], counters.stale_divergences)
        self.refused.add_metric([group, "unknown_replica"], counters.unknown_replica_requests)
        self.refused.add_metric([group, "stale_epoch"], counters.stale_epoch_requests)
        self.transfers.add_metric([group, "handed_over"], counters.transfers_handed_over)
        self.transfers.add_metric([group, "abandoned"], counters.transfers_abandoned)
        self.transfers.add_metric([group, "stood"], counters.transfer_candidacies)
        self.incarnations.add_metric([group], counters.peer_incarnation_changes)
        self.stalled.add_metric([group], counters.followers_stalled)
        self.deleted_records.add_metric([group], counters.records_deleted)

    def families(self) -> tuple[Metric, ...]:
        return (self.elections, self.truncations, self.applied, self.divergences,
                self.refused, self.transfers, self.incarnations, self.stalled,
                self.deleted_records)


def broker_registry(server) -> CollectorRegistry:
    """A registry of one started BrokerServer (its own, not the process-wide default)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server.metrics, server.context.partitions, server.groups,
                                      connections=lambda: server.connection_count,
                                      peer_refusals=server.peer_refusals,
                                      listeners=lambda: server.acceptors,
                                      offsets=server.offsets))
    return registry
