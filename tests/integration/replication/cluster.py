"""A replicated Kaska cluster of real broker processes on 127.0.0.1, for fault tests.

`BrokerCluster(tmp_path, size=3)` is scripts/launcher/local_cluster.py's LocalCluster (every
port picked up front, each broker told the others'; kill, pause, resume, restart) with what
the tests ask of it: who
leads (METADATA from each live broker, until they agree), and, once every process is gone,
read each broker's bytes of a partition straight from its data directory.

With `peer_via_proxy=True` each broker reaches each peer through its own `PeerProxy` (one per
ordered pair), so a test can cut a broker off from the others while clients still reach it
directly. METADATA and NOT_LEADER hints then name the proxy addresses (what the broker was
told its peers are): clients following them go through the same proxies.

The brokers share a cluster secret (`<tmp>/cluster_secret`, passed with `--secret-file`): tests
that forge peer frames read it from `BrokerCluster.secret`.

Each broker's stderr goes to `<tmp>/node<I>.broker.log` (appended across restarts, with a
harness line at every start and signal).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from common.kaska import Admin
from common.kaska.connection import BrokerConnection
from common.kaska.errors import KaskaError, NotLeaderError
from common.kaska.protocol.metadata import NO_LEADER, MetadataRequest, MetadataResponse
from common.kaska.retry import RetryPolicy
from scripts.launcher.local_cluster import LocalCluster
from services.broker.replication.identity import derived_cluster_id
from services.broker.replication.placement import group_directory, group_of
from services.broker.storage.log import Log
from tests.integration.metrics_scrape import scrape

# Fast failover for tests: elections within 0.5-1 s of silence, a cut-off leader steps down
# after 1.5 s without a majority fetching from it.
FAST_ELECTIONS = ("--election-timeout-ms-min", "500", "--election-timeout-ms-max", "1000",
                  "--quorum-timeout-ms", "1500")
LEADER_TIMEOUT_S = 30.0
PROBE_TIMEOUTS = {"connect_timeout_s": 1.0, "request_timeout_s": 2.0}
READ_ALL_BYTES = 1 << 30
# What a broker logs when it cuts or truncates its journal or data (recovery, divergence).
RECOVERY_LINE = re.compile(r"truncated the journal|journal entries cut|data past its journal|"
                           r"holds data past its journal|valid entries end at byte")
# A broker asked to drop committed entries: never legitimate.
SAFETY_LINE = re.compile(r"refusing to truncate|below the commit index")
ROLE_LINE = re.compile(r"broker (\d+): (leader|follower|candidate) of epoch (\d+) "
                       r"\(leader (\w+)\)")


@dataclass(frozen=True, slots=True)
class LeaderView:
    """What one broker says: the leader it knows (NO_LEADER: none) and its epoch."""

    node_id: int
    leader_id: int
    epoch: int


class BrokerCluster(LocalCluster):
    def __init__(self, tmp_path: Path, size: int = 3, peer_via_proxy: bool = False,
                 extra_args: tuple[str, ...] = (), kafka: bool = False, groups: int = 1) -> None:
        """scripts/launcher/local_cluster.py's cluster. `groups`: the replication groups
        (--replication-groups). One by default: the tests of one group's machinery read its
        single leader from the role lines and its partitions from the data directory itself;
        the tests of leadership per partition ask for more."""
        self.groups = groups
        super().__init__(tmp_path, size, peer_via_proxy=peer_via_proxy, kafka=kafka,
                         extra_args=("--replication-groups", str(groups), *extra_args))
        # The brokers are given no --cluster-id: they derive this one from the voter ids.
        self.cluster_id = derived_cluster_id(self.ids)

    def start(self) -> BrokerCluster:
        """Start every broker, then wait for all to listen and agree on a leader: a client's
        first request must not race the election (a client with a short retry budget gave up
        on NOT_LEADER during it on a busy machine)."""
        super().start()
        self.leader()
        return self

    def __enter__(self) -> BrokerCluster:
        return self

    # -- who leads ---------------------------------------------------------------------------

    def metadata(self, i: int) -> MetadataResponse | None:
        """Broker i's METADATA for every topic; None when it does not answer in time."""
        try:
            connection = BrokerConnection(self.brokers[i].host_port, **PROBE_TIMEOUTS)
        except KaskaError:
            return None
        try:
            return connection.request(MetadataRequest(()))
        except KaskaError:
            return None
        finally:
            connection.close()

    def view(self, i: int) -> LeaderView | None:
        """Who broker i says leads the metadata group (the controller METADATA names; with one
        group, every partition's leader), or its last role line of that group in the log when
        it names none."""
        response = self.metadata(i)
        if response is None:
            return None
        if response.controller_id != NO_LEADER:
            return LeaderView(i, response.controller_id, response.controller_epoch)
        return self._view_from_log(i)

    def group_view(self, i: int, group: int) -> LeaderView | None:
        """Who broker i says leads replication group `group` (its metrics); None when it does
        not answer."""
        try:
            _text, samples = scrape(self.brokers[i].metrics_port)
        except OSError:
            return None
        labels = (("group", str(group)),)
        leader = samples.get(("kaska_replication_leader_id", labels))
        epoch = samples.get(("kaska_replication_epoch", labels))
        if leader is None or epoch is None:
            return None
        return LeaderView(i, int(leader), int(epoch))

    def group_leader(self, group: int, timeout_s: float = LEADER_TIMEOUT_S, among=None,
                     min_epoch: int = 0) -> LeaderView:
        """As `leader`, for replication group `group`: every broker of `among` (default: the
        live ones) names the same leader of it, one of them, at the same epoch."""
        return self._agreed(lambda i: self.group_view(i, group), f"leader of group {group}",
                            timeout_s, among, min_epoch)

    def partition_offsets(self, i: int, topic: str) -> dict[int, tuple[int, int]] | None:
        """Broker i's {partition: (log end offset, high watermark)} of `topic` from its
        metrics; None when it does not answer (down, paused, starting)."""
        try:
            _text, samples = scrape(self.brokers[i].metrics_port)
        except OSError:
            return None
        found: dict[int, list[int]] = {}
        for (name, labels), value in samples.items():
            fields = dict(labels)
            if fields.get("topic") != topic:
                continue
            slot = {"kaska_partition_log_end_offset": 0,
                    "kaska_partition_high_watermark": 1}.get(name)
            if slot is not None:
                found.setdefault(int(fields["partition"]), [0, 0])[slot] = int(value)
        return {partition: (end, hw) for partition, (end, hw) in found.items()}

    def wait_caught_up(self, topic: str, partitions: list[int],
                       timeout_s: float = LEADER_TIMEOUT_S) -> dict[int, tuple[int, int]]:
        """Until every broker reports, for each partition, the same log end offset and a
        high watermark equal to it (writers stopped: everything replicated and committed);
        that {partition: (end, hw)}. Raises AssertionError with the last readings."""
        deadline = time.monotonic() + timeout_s
        while True:
            readings = {i: self.partition_offsets(i, topic) for i in self.ids}
            first = readings[self.ids[0]]
            if first is not None and all(
                    (reading := readings[i]) is not None
                    and all(reading.get(p) == first.get(p) for p in partitions)
                    for i in self.ids) and all(
                    p in first and first[p][0] == first[p][1] for p in partitions):
                return {p: first[p] for p in partitions}
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: replicas not caught up in {timeout_s:g} s: "
                                     f"{readings}")
            time.sleep(0.05)

    def _view_from_log(self, i: int) -> LeaderView | None:
        lines = self.log_lines(i, ROLE_LINE)
        if not lines:
            return None
        match = ROLE_LINE.search(lines[-1])
        leader = match.group(4)
        return LeaderView(i, int(leader) if leader.isdigit() else NO_LEADER,
                          int(match.group(3)))

    def leader(self, timeout_s: float = LEADER_TIMEOUT_S, among=None,
               min_epoch: int = 0) -> LeaderView:
        """Poll until every broker of `among` (default: the live ones) answers and names the
        same leader (of the metadata group), one of them, at the same epoch >= min_epoch; that
        view."""
        return self._agreed(self.view, "leader", timeout_s, among, min_epoch)

    def _agreed(self, view, what: str, timeout_s: float, among, min_epoch: int) -> LeaderView:
        deadline = time.monotonic() + timeout_s
        last: list[LeaderView | None] = []
        while True:
            ids = list(among) if among is not None else self.live_ids()
            last = [view(i) for i in ids]
            if all(seen is not None for seen in last):
                leaders = {(seen.leader_id, seen.epoch) for seen in last}
                if len(leaders) == 1:
                    leader_id, epoch = leaders.pop()
                    if leader_id in ids and epoch >= min_epoch:
                        return LeaderView(leader_id, leader_id, epoch)
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed {what} among {ids} (epoch >= {min_epoch}) "
                                     f"within {timeout_s:.0f} s; views: {last}")
            time.sleep(0.1)

    def leader_id(self, timeout_s: float = LEADER_TIMEOUT_S, among=None) -> int:
        return self.leader(timeout_s, among).leader_id

    def create_topic(self, name: str, partitions: int = 1,
                     timeout_s: float = LEADER_TIMEOUT_S) -> None:
        """Create through the leader (asked directly: CREATE_TOPIC goes to "any broker")."""
        deadline = time.monotonic() + timeout_s
        while True:
            leader = self.leader_id(timeout_s)
            try:
                with Admin(self.address(leader), retry=RetryPolicy(3, 0.1, 0.5),
                           request_timeout_s=15.0, connect_timeout_s=2.0) as admin:
                    admin.create_topic(name, partitions)
                return
            except NotLeaderError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    # -- logs --------------------------------------------------------------------------------

    def log_lines(self, i: int, pattern: re.Pattern | str) -> list[str]:
        path = self.brokers[i].log_path
        if not path.exists():
            return []
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        text = path.read_text(errors="replace")
        return [line for line in text.splitlines() if regex.search(line)]

    def recovery_lines(self, i: int) -> list[str]:
        return self.log_lines(i, RECOVERY_LINE)

    def safety_lines(self) -> dict[int, list[str]]:
        """Every broker's log lines that say committed data was about to be dropped."""
        found = {i: self.log_lines(i, SAFETY_LINE) for i in self.ids}
        return {i: lines for i, lines in found.items() if lines}

    def error_lines(self) -> dict[int, int]:
        """ERROR-level log lines per broker (reported, not judged)."""
        return {i: len(self.log_lines(i, r" ERROR |Traceback")) for i in self.ids}

    # -- stored data (every process gone) ----------------------------------------------------

    def partition_logs(self, topic: str, partition: int, upto_offset: int | None = None
                       ) -> dict[int, bytes]:
        """Each broker's bytes of the partition (from its log start; below `upto_offset` when
        given), read from its data directory. Only once the processes are gone."""
        return {i: stored.data for i, stored in
                self.stored_partitions(topic, partition, upto_offset).items()}

    def stored_partitions(self, topic: str, partition: int, upto_offset: int | None = None
                          ) -> dict[int, StoredPartition]:
        stored = {}
        group = group_of(topic, partition, self.groups)
        for i, broker in self.brokers.items():
            assert not broker.alive(), f"broker {i} still runs: stop_all() first"
            with Log(group_directory(broker.data_dir, group),
                     holds=lambda t, p: group_of(t, p, self.groups) == group) as log:
                if topic not in log.topics():
                    stored[i] = StoredPartition(0, 0, b"")
                    continue
                partition_log = log.partition(topic, partition)
                start = partition_log.log_start_offset
                data = partition_log.read_bytes(start, READ_ALL_BYTES, upto_offset)
                stored[i] = StoredPartition(start, partition_log.log_end_offset, data)
        return stored


@dataclass(frozen=True, slots=True)
class StoredPartition:
    log_start_offset: int
    log_end_offset: int
    data: bytes
