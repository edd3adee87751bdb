"""A replicated Kaska cluster of real broker processes on 127.0.0.1, for fault tests.

`BrokerCluster(tmp_path, size=3)` picks every port up front (each broker must be told the
others'), starts the brokers, and lets a test kill, pause, resume and restart them, ask who
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

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.cluster_secret import SECRET_ENV, write_secret_file
from common.kaska import Admin
from common.kaska.connection import BrokerConnection
from common.kaska.errors import KaskaError, NotLeaderError
from common.kaska.protocol.metadata import NO_LEADER, MetadataRequest, MetadataResponse
from common.kaska.retry import RetryPolicy
from scripts.nemesis.proxy import PeerProxy
from services.broker.replication.identity import derived_cluster_id
from services.broker.replication.placement import group_directory, group_of
from services.broker.storage.log import Log
from tests.integration.broker.broker_process import REPO, BrokerProcess
from tests.integration.metrics_scrape import scrape

# Fast failover for tests: elections within 0.5-1 s of silence, a cut-off leader steps down
# after 1.5 s without a majority fetching from it.
FAST_ELECTIONS = ("--election-timeout-ms-min", "500", "--election-timeout-ms-max", "1000",
                  "--quorum-timeout-ms", "1500")
LEADER_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
PROBE_TIMEOUTS = {"connect_timeout_s": 1.0, "request_timeout_s": 2.0}
READ_ALL_BYTES = 1 << 30
# What a broker logs when it cuts or truncates its journal or data (recovery, divergence).
RECOVERY_LINE = re.compile(r"truncated the journal|journal entries cut|data past its journal|"
                           r"holds data past its journal|valid entries end at byte")
# A broker asked to drop committed entries: never legitimate.
SAFETY_LINE = re.compile(r"refusing to truncate|below the commit index")
ROLE_LINE = re.compile(r"broker (\d+): (leader|follower|candidate) of epoch (\d+) "
                       r"\(leader (\w+)\)")


def reserve_ports(count: int) -> list[socket.socket]:
    """Bound (not listening) sockets on distinct free ports; close them right before use, so
    nothing else created meanwhile (proxies) can take the ports."""
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    return sockets


def free_ports(count: int) -> list[int]:
    sockets = reserve_ports(count)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@dataclass(frozen=True, slots=True)
class LeaderView:
    """What one broker says: the leader it knows (NO_LEADER: none) and its epoch."""

    node_id: int
    leader_id: int
    epoch: int


class ClusterBroker(BrokerProcess):
    """One broker of the cluster: BrokerProcess with a node id and peers."""

    def __init__(self, node_id: int, data_dir: Path, port: int, peers: str,
                 extra_args: tuple[str, ...], metrics_port: int, secret_file: Path) -> None:
        super().__init__(data_dir, *extra_args, port=port)
        self.metrics_port = metrics_port
        self.node_id = node_id
        self.peers = peers
        self.secret_file = secret_file
        self.paused = False
        self.starts = 0

    def note(self, text: str) -> None:
        """A harness line in the broker's log, so the log reads as a timeline of the test."""
        with open(self.log_path, "a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} ===== harness: {text} =====\n")

    def launch(self) -> None:
        """Start the process; `wait_ready` reads its readiness line."""
        command = [sys.executable, "-m", "services.broker", "--node-id", str(self.node_id),
                   "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir),
                   "--peers", self.peers, "--secret-file", str(self.secret_file),
                   "--metrics-listen", f"127.0.0.1:{self.metrics_port}", *self.extra_args]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("KASKA_TOKEN", None)
        env.pop(SECRET_ENV, None)
        self.starts += 1
        self.note(f"start #{self.starts}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                         stderr=log)
        self.paused = False

    def wait_ready(self) -> None:
        line = self._ready_line()
        port = int(line.rsplit(":", 1)[1])
        assert port == self.port, f"broker {self.node_id} listens on {port}, not {self.port}"

    def start(self) -> ClusterBroker:
        self.launch()
        self.wait_ready()
        return self

    def signal(self, signum: int) -> None:
        self.note(f"signal {signal.Signals(signum).name}")
        self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        try:
            code = self.proc.wait(timeout_s)
        finally:
            self.proc.stdout.close()
        self.paused = False
        return code


class BrokerCluster:
    def __init__(self, tmp_path: Path, size: int = 3, peer_via_proxy: bool = False,
                 extra_args: tuple[str, ...] = (), kafka: bool = False, groups: int = 1) -> None:
        """Every broker serves /metrics on its own port (`metrics_ports`); with `kafka` also
        Kafka's protocol on another (`kafka_ports`), each told the others' (--kafka-peers).
        `groups`: the replication groups (--replication-groups). One by default: the tests of
        one group's machinery read its single leader from the role lines and its partitions
        from the data directory itself; the tests of leadership per partition ask for more."""
        self.groups = groups
        extra_args = ("--replication-groups", str(groups), *extra_args)
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.secret = write_secret_file(tmp_path / "cluster_secret")
        self.ids = list(range(1, size + 1))
        # The brokers are given no --cluster-id: they derive this one from the voter ids.
        self.cluster_id = derived_cluster_id(self.ids)
        self.peer_via_proxy = peer_via_proxy
        # Each broker's client port and metrics port (and Kafka port).
        reserved = reserve_ports((3 if kafka else 2) * size)
        ports = {i: sock.getsockname()[1]
                 for i, sock in zip(self.ids, reserved[:size], strict=True)}
        # Held with the brokers' ports until the brokers start: nothing else can take them.
        self.metrics_ports = {i: sock.getsockname()[1]
                              for i, sock in zip(self.ids, reserved[size:2 * size], strict=True)}
        self.kafka_ports = {i: sock.getsockname()[1]
                            for i, sock in zip(self.ids, reserved[2 * size:], strict=True)
                            } if kafka else {}
        self.proxies: dict[tuple[int, int], PeerProxy] = {}
        if peer_via_proxy:
            for i in self.ids:
                for j in self.ids:
                    if i != j:
                        self.proxies[(i, j)] = PeerProxy(("127.0.0.1", ports[j]),
                                                         name=f"{i}->{j}")
        self.brokers: dict[int, ClusterBroker] = {}
        for i in self.ids:
            peers = ",".join(f"{j}@{self._peer_address(i, j, ports)}"
                             for j in self.ids if j != i)
            self.brokers[i] = ClusterBroker(i, tmp_path / f"node{i}", ports[i], peers,
                                            (*extra_args, *self._kafka_args(i)),
                                            self.metrics_ports[i], tmp_path / "cluster_secret")
        for sock in reserved:
            sock.close()

    def _kafka_args(self, i: int) -> tuple[str, ...]:
        if not self.kafka_ports:
            return ()
        peers = ",".join(f"{j}@{self.kafka_address(j)}" for j in self.ids if j != i)
        return ("--kafka-listen", self.kafka_address(i), "--kafka-peers", peers)

    def kafka_address(self, i: int) -> str:
        """Broker i's Kafka listener, "127.0.0.1:port" (a cluster made with `kafka=True`)."""
        return f"127.0.0.1:{self.kafka_ports[i]}"

    def _peer_address(self, i: int, j: int, ports: dict[int, int]) -> str:
        if self.peer_via_proxy:
            return self.proxies[(i, j)].address
        return f"127.0.0.1:{ports[j]}"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> BrokerCluster:
        """Start every broker at once (each waits for nobody to listen), then wait for all to
        listen and agree on a leader: a client's first request must not race the election
        (a client with a short retry budget gave up on NOT_LEADER during it on a busy machine)."""
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.wait_ready()
        self.leader()
        return self

    def __enter__(self) -> BrokerCluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Kill whatever still runs and close the proxies (teardown; idempotent)."""
        for broker in self.brokers.values():
            if broker.alive():
                with contextlib.suppress(OSError):
                    broker.proc.send_signal(signal.SIGCONT)
            broker.kill()
        for proxy in self.proxies.values():
            proxy.close()

    def kill(self, i: int, sig: int = signal.SIGKILL) -> int:
        """Send `sig` (SIGKILL, SIGTERM, ...) and wait for the process to end; its exit code."""
        broker = self.brokers[i]
        broker.signal(sig)
        if broker.paused and sig != signal.SIGKILL:
            broker.proc.send_signal(signal.SIGCONT)  # a stopped process handles nothing
        return broker.wait_exit()

    def pause(self, i: int) -> None:
        broker = self.brokers[i]
        broker.signal(signal.SIGSTOP)
        broker.paused = True

    def resume(self, i: int) -> None:
        broker = self.brokers[i]
        broker.signal(signal.SIGCONT)
        broker.paused = False

    def start_broker(self, i: int) -> None:
        """Start a broker that is not running, on its own port and data directory."""
        assert not self.brokers[i].alive(), f"broker {i} is running"
        self.brokers[i].start()

    def restart(self, i: int) -> None:
        """SIGTERM (when running), then start again."""
        if self.brokers[i].alive():
            code = self.kill(i, signal.SIGTERM)
            assert code == 0, f"broker {i} exited {code} on SIGTERM: {self.brokers[i].tail()}"
        self.start_broker(i)

    def stop_all(self) -> dict[int, int]:
        """SIGTERM every running broker at once (resuming paused ones), wait; exit codes."""
        running = [i for i in self.ids if self.brokers[i].alive()]
        for i in running:
            self.brokers[i].signal(signal.SIGTERM)
            if self.brokers[i].paused:
                self.brokers[i].proc.send_signal(signal.SIGCONT)
        codes = {}
        for i in running:
            try:
                codes[i] = self.brokers[i].wait_exit()
            except subprocess.TimeoutExpired:
                self.brokers[i].kill()
                codes[i] = None
        return codes

    # -- addresses ---------------------------------------------------------------------------

    def address(self, i: int) -> str:
        return self.brokers[i].address

    @property
    def bootstrap(self) -> str:
        """Every broker's client address, "h1:p1,h2:p2,h3:p3"."""
        return self.bootstrap_of(self.ids)

    def bootstrap_of(self, ids) -> str:
        return ",".join(self.address(i) for i in ids)

    def live_ids(self) -> list[int]:
        """Running and not paused."""
        return [i for i in self.ids if self.brokers[i].alive() and not self.brokers[i].paused]

    def others(self, i: int) -> list[int]:
        return [j for j in self.ids if j != i]

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

    def log_paths(self) -> dict[int, Path]:
        return {i: broker.log_path for i, broker in self.brokers.items()}

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
