"""The broker process: recover the log, then accept connections and serve them.

Replication groups (replication/placement.py, cluster/replication_groups.py): the broker opens
one Log and one ReplicationNode per group (group 0 in the data directory, group g in
`@group-<g>/`, after checking the group count the directory was written with), then, once it
listens, a ReplicaManager per group, the handlers' context over them (context.py: partitions
found through cluster/partition_table.py, topics through cluster/topic_admin.py), a topic
mirror per data group and, with several groups, the leader balancer. Stopping stops the
balancer and the mirrors first, then every group hands over what it leads, at once.

Concurrency model — one thread per connection, at most `connections_max` of them:
- The storage interface is synchronous: `append_from` calls back into the connection to
  `recv_into` the log's mapped region, and fetches end in `os.sendfile`. Both block in the
  kernel with the GIL released, so threads overlap I/O and CRC work without an event loop
  that would have to run those calls in threads anyway.
- A request runs start to finish on its connection's thread, so per-connection ordering (a
  producer's batches, then its next batch) needs no extra bookkeeping.
- Memory and thread count stay bounded: over `connections_max` a new connection is closed
  at once; each connection holds at most one control body (`control_body_bytes_max`) and a
  64 KiB drain buffer; produce bodies go straight to the log and never to the heap.
- Stalled peers are bounded by SO_RCVTIMEO/SO_SNDTIMEO (`read_timeout_s`), a request body
  trickling in by the same bound on the whole body (network/body.py), idle peers by
  `idle_timeout_s`.

Shutdown (`stop()`, SIGTERM in `__main__`): stop accepting, hand leadership over if this broker
leads (`shutdown_handover_ms`; raft.py's leadership transfer), stop replication (which wakes
produce requests waiting for acks), wake long-polls, let every request in flight finish (idle
connections close at once), force-close what outlives `shutdown_grace_s`, then flush and close
the log. Startable in-process:
`BrokerServer(config).start()` ... `.stop()`.

With Kafka listeners configured (kafka/config.py: `--kafka-listeners`, or `--kafka-listen`), each
named one speaks Kafka's protocol over the same log, context and replication
(services/broker/kafka/listener.py), advertising its own addresses: bound with the Kaska
listener, started with it, and stopped and drained alongside it.

Companions (`start()`/`stop()` objects, e.g. the heartbeat sender of `common/heartbeat.py`)
start once the broker listens and stop first on shutdown.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import OFFSETS_PARTITION, CommittedOffsets
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.cluster.replication_groups import ReplicationGroup, ReplicationGroups
from services.broker.cluster.retention import RetentionThread
from services.broker.cluster.topic_configs import TopicConfigs
from services.broker.config import BrokerConfig
from services.broker.context import BrokerContext
from services.broker.metrics import BrokerCounters
from services.broker.network.acceptor import Acceptor
from services.broker.network.connection import Connection
from services.broker.network.notifier import DataNotifier
from services.broker.network.peer_gate import PeerGate, PeerRefusals
from services.broker.replication.committed_topics import CommittedTopics
from services.broker.replication.leader_balance import BalanceRule, LeaderBalancer
from services.broker.replication.node import ReplicationNode
from services.broker.replication.peer_link import PeerSigner
from services.broker.replication.placement import (
    METADATA_GROUP,
    check_group_count,
    group_directory,
    group_of,
    partitions_of,
)
from services.broker.replication.topic_mirror import TopicMirror
from services.broker.storage.log import Log
from services.broker.storage.partition import AppendResult

if TYPE_CHECKING:
    from services.broker.kafka.listener import KafkaListener

log = logging.getLogger(__name__)


class Companion(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


def _holds(group: int, groups: int, topic: str, partition: int) -> bool:
    return group_of(topic, partition, groups) == group


def _holds_any(group: int, groups: int, topic: str, partitions: int) -> bool:
    return bool(partitions_of(topic, partitions, group, groups))


class BrokerServer:
    def __init__(self, config: BrokerConfig, companions: Iterable[Companion] = ()) -> None:
        self.config = config
        self._companions = list(companions)
        self._lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()
        network = config.network
        self._acceptor = Acceptor(*network.listen, name="kaska",
                                  connections_max=network.connections_max,
                                  read_timeout_s=network.read_timeout_s,
                                  backlog=network.listen_backlog)
        self.address: tuple[str, int] | None = None
        self.kafka_listeners: list[KafkaListener] = []  # in --kafka-listeners order
        self.metrics = BrokerCounters()  # read by services.broker.metrics at scrape time
        self._opened_logs: list[Log] = []  # every group's, as opened (closed on stop)
        self._opened_nodes: list[ReplicationNode] = []
        self.peer_refusals = PeerRefusals()  # peer frames refused (network/peer_gate.py), ditto

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> BrokerServer:
        config = self.config
        try:
            self._start_locked()
        except BaseException:
            self._abort_start()
            raise
        log.info("broker %d listening on %s:%d (data %s)", config.node_id, *self.address,
                 config.data_dir)
        return self

    def _start_locked(self) -> None:
        config = self.config
        # Bind first (a taken port fails fast), listen only once recovery is done.
        self._acceptor.bind()
        self._bind_kafka()
        check_group_count(config.data_dir, config.groups)
        notifier = DataNotifier()
        self._groups: list[ReplicationGroup] = []
        for number in range(config.groups):
            self._groups.append(self._open_group(number, notifier))
        groups = ReplicationGroups(self._groups)
        self.node = groups.metadata.node
        # Before the table is read: its topic settings reach the partitions as they load.
        topic_configs = TopicConfigs(self.offsets, config.storage)
        topic_configs.attach(group.log for group in groups)
        self.offsets.load()
        self._acceptor.listen()
        self.address = self._acceptor.address
        advertised = config.network.advertise or self.address
        for group in groups:
            group.replicas = ReplicaManager(group.node, advertised, group.log,
                                            config.ack_timeout_s, counters=self.metrics)
        self.groups = groups
        self.context = BrokerContext.over(
            groups, config=config, offsets=self.offsets, notifier=notifier, metrics=self.metrics,
            peer_gate=PeerGate(config.node_id, [peer.node_id for peer in config.peers],
                               config.cluster_secret, self.peer_refusals,
                               cluster_id=self.node.identity.cluster_id,
                               data_incarnations=[g.node.identity.incarnation
                                                  for g in groups]),
            topic_configs=topic_configs)
        for group in groups:
            group.node.start()
        for group in list(groups)[1:]:
            group.mirror = TopicMirror(
                group.number, groups.metadata.node, groups.metadata.topics, group.node,
                group.topics, group.manager,
                holds_any=functools.partial(_holds_any, group.number, config.groups))
            group.mirror.start()
        self._balancer = None
        if groups.count > 1 and config.placement.preferred_leader_steady_ms > 0:
            self._balancer = LeaderBalancer(
                [group.node for group in groups],
                BalanceRule(steady_s=config.placement.preferred_leader_steady_ms / 1000))
            self._balancer.start()
        self._retention = RetentionThread(self.context.partitions,
                                          config.retention_check_interval_ms,
                                          safe_offset=groups.retention_safe_offset,
                                          compactable_below=self.offsets.compactable_below)
        self._retention.start()
        for companion in self._companions:
            companion.start()
        if self.kafka_listeners:
            self._start_kafka()
        self._acceptor.start(lambda sock, peer, forget: Connection(sock, peer, self.context,
                                                                   forget))

    def _open_group(self, number: int, notifier: DataNotifier) -> ReplicationGroup:
        """Open group `number`'s Log and replication state (recovery and reconcile included);
        group 0 also carries the committed offsets (`__offsets`)."""
        config = self.config
        directory = group_directory(config.data_dir, number)
        storage = Log(directory, config.storage,
                      holds=functools.partial(_holds, number, config.groups))
        self._opened_logs.append(storage)
        signer = PeerSigner(config.node_id, config.cluster_secret, self.peer_refusals,
                            group=number) if config.cluster_secret else None
        offsets: dict = {}
        if number == METADATA_GROUP:
            # Commits are appended through replication; the manager exists only further down.
            self.offsets = CommittedOffsets(storage, append=self._append_offsets)
            offsets = {"on_offsets_batch": self.offsets.absorb,
                       "on_offsets_truncated": self.offsets.load}
        node = ReplicationNode(
            replace(config.replication, group=number), storage, directory,
            on_topic_deleted=notifier.forget_topic, on_partition_visible=notifier.notify,
            peer_signer=signer, **offsets)
        self._opened_nodes.append(node)
        return ReplicationGroup(number, storage, node, CommittedTopics(node.journal))

    def _append_offsets(self, batch: bytes) -> AppendResult:
        """Commits go through replication, once the broker listens (the context exists)."""
        return self.context.partitions.get(OFFSETS_TOPIC, OFFSETS_PARTITION).append(batch)

    def stop(self) -> None:
        """Graceful stop; safe to call more than once and from any thread."""
        with self._lock:
            already = self._stopping
            self._stopping = True
        if already:
            self._stopped.wait()
            return
        self._stop_accepting()
        for companion in self._companions:
            companion.stop()
        if self._balancer is not None:
            self._balancer.stop()
        for group in self._groups:
            if group.mirror is not None:
                group.mirror.stop()
        self._hand_over()
        # Replication first: it wakes every produce waiting for acks (answered with a retriable
        # error; the client retries on the next leader), so connections drain at once instead
        # of waiting for acks that followers, drained too, would never send.
        for group in self._groups:
            group.node.stop()
        self.context.notifier.stop()
        self._drain_connections()
        self._retention.stop()
        self._close_storage()
        self._stopped.set()
        log.info("broker %d stopped", self.config.node_id)

    def _hand_over(self) -> None:
        """A leader hands leadership to its best caught-up voter before it stops (Kafka's
        controlled shutdown): the followers' connections are still open, so the target's next
        fetch is told to stand, and the cluster elects at once rather than after an election
        timeout. Produces meanwhile get NOT_LEADER (retriable); acknowledged ones are
        committed on the target too."""
        timeout_s = self.config.shutdown_handover_ms / 1000
        if timeout_s <= 0:
            return
        # Every group this broker leads hands over at once, within one bound.
        handing = [threading.Thread(target=self._hand_over_group, args=(group, timeout_s),
                                    name=f"kaska-handover-g{group.number}")
                   for group in self.groups]
        for thread in handing:
            thread.start()
        for thread in handing:
            thread.join()

    def _hand_over_group(self, group: ReplicationGroup, timeout_s: float) -> None:
        started = time.monotonic()
        if group.node.transfer_leadership(timeout_s):
            log.info("%s handed leadership over in %.3f s", group.node.name,
                     time.monotonic() - started)

    def status(self) -> str:
        """What the heartbeats report: "" when healthy, else why writes are refused (a full
        disk: see storage/disk_space.py)."""
        for storage in getattr(self, "_opened_logs", ()):
            status = storage.space.status()
            if status:
                return status
        return ""

    @property
    def kafka_addresses(self) -> dict[str, tuple[str, int]]:
        """Each Kafka listener's bound (host, port), by name; {} without one."""
        return {listener.listener: listener.address for listener in self.kafka_listeners}

    @property
    def bootstrap(self) -> str:
        """"host:port" of the listening socket, as clients take it."""
        assert self.address is not None, "start() first"
        return f"{self.address[0]}:{self.address[1]}"

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stop() completed; False on timeout."""
        return self._stopped.wait(timeout_s)

    def __enter__(self) -> BrokerServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- start helpers -----------------------------------------------------------------------

    def _bind_kafka(self) -> None:
        config = self.config
        if not config.kafka.enabled:
            return
        # Imported only when used: kafka-python's schemas cost a broker without a Kafka
        # listener half a second of start-up on a busy machine.
        from services.broker.kafka.listener import KafkaListener
        for spec in config.kafka.specs():
            listener = KafkaListener(spec.name, *spec.listen,
                                     connections_max=config.network.connections_max,
                                     read_timeout_s=config.network.read_timeout_s,
                                     request_bytes_max=config.network.frame_bytes_max,
                                     backlog=config.network.listen_backlog)
            # Kept before binding: a later listener's taken port must release this one.
            self.kafka_listeners.append(listener)
            listener.bind()

    def _start_kafka(self) -> None:
        """Each listener with its own context (its advertised addresses); one group
        coordinator and one producer-id source for all."""
        from services.broker.kafka.consumer_groups import GroupCoordinator
        from services.broker.kafka.context import KafkaContext

        config = self.config
        shared = {"broker": self.context, "node_id": config.node_id,
                  "cluster_id": self.node.identity.cluster_id, "rng": random.SystemRandom(),
                  "consumer_groups": GroupCoordinator()}
        for listener in self.kafka_listeners:
            brokers = config.kafka.brokers_on(listener.listener, config.node_id,
                                              listener.address)
            listener.start(KafkaContext(brokers=brokers, listener=listener.listener, **shared))

    def _abort_start(self) -> None:
        for listener in self.kafka_listeners:
            listener.close_unstarted()
        retention = getattr(self, "_retention", None)
        if retention is not None:
            retention.stop()
        self._acceptor.close_unstarted()
        balancer = getattr(self, "_balancer", None)
        if balancer is not None:
            balancer.stop()
        for group in getattr(self, "_groups", ()):
            if group.mirror is not None:
                group.mirror.stop()
        for node in self._opened_nodes:
            node.stop()
        for storage in self._opened_logs:
            storage.close()

    @property
    def connection_count(self) -> int:
        return self._acceptor.connection_count

    @property
    def acceptors(self) -> list[Acceptor]:
        """Kaska's listener and each Kafka listener, for the metrics."""
        return [self._acceptor, *self.kafka_listeners]

    # -- stop helpers ------------------------------------------------------------------------

    def _stop_accepting(self) -> None:
        self._acceptor.stop_accepting()
        for listener in self.kafka_listeners:
            listener.stop_accepting()

    def _drain_connections(self) -> None:
        """Every listener's connections drain at the same time, within one grace period."""
        acceptors = self.acceptors
        for acceptor in acceptors:
            acceptor.interrupt_all()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        for acceptor in acceptors:
            acceptor.finish(max(0.0, deadline - time.monotonic()))

    def _close_storage(self) -> None:
        for storage in self._opened_logs:
            storage.flush()
            storage.close()  # also releases the data directory's lock
