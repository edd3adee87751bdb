"""The local broker cluster: N brokers (N odd) on 127.0.0.1, each naming the others as its
peers, and the wait until the cluster serves.

Readiness comes in two steps. A broker prints `kaska broker <id> listening on <host>:<port>`
once it serves (services/broker/__main__.py), so first every broker's log must hold that line.
Listening is not leading: writes need a leader that a majority elected. So then the cluster is
asked, through the client library with the whole bootstrap list, to create the `sessions`
topic (one partition, as the query service and every client create it; "already exists" counts
as done) and to list the topics. A create is journaled by the leader and answered once a
majority holds it (docs/replication.md), so its success proves a leader and a quorum.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.address import Address, Peer, parse_host_ports
from common.flights.session_records import SESSIONS_TOPIC
from common.kaska import Admin
from common.kaska.errors import KaskaError, TopicAlreadyExistsError
from common.kaska.retry import RetryPolicy
from scripts.launcher.errors import RunLocalError
from scripts.launcher.layout import RunLayout, broker_name
from scripts.launcher.local_cluster import BrokerSpec

BROKERS_DEFAULT = 3
BROKERS_MAX = 9
LISTEN_TIMEOUT_S = 30.0
LEADER_TIMEOUT_S = 60.0
POLL_S = 0.1
LOG_TAIL_LINES = 15
# One attempt of the leader wait: short, the wait itself retries (from another broker).
ATTEMPT_REQUEST_TIMEOUT_S = 5.0
ATTEMPT_CONNECT_TIMEOUT_S = 1.0
ATTEMPT_RETRIES_MAX = 2


@dataclass(frozen=True)
class BrokerNode:
    """One broker of the local cluster."""

    node_id: int
    port: int
    data_dir: Path
    host: str = "127.0.0.1"

    @property
    def name(self) -> str:
        return broker_name(self.node_id)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def peer(self) -> Peer:
        """How the other brokers name this one in their `--peers` (`ID@HOST:PORT`)."""
        return Peer(self.node_id, self.host, self.port)


def broker_count_error(count: int) -> str | None:
    """Why `count` brokers cannot make a cluster, or None when they can."""
    if not 1 <= count <= BROKERS_MAX:
        return f"--brokers must lie in [1, {BROKERS_MAX}], got {count}"
    if count % 2 == 0:
        return (f"--brokers must be odd (N brokers survive (N-1)/2 failures, so an even count "
                f"adds a broker but no tolerance), got {count}")
    return None


def plan_brokers(ports: Sequence[int], layout: RunLayout) -> list[BrokerNode]:
    """Brokers 1..len(ports), one port and one data directory each."""
    return [BrokerNode(node_id, port, layout.broker_data_dir(node_id))
            for node_id, port in enumerate(ports, start=1)]


def bootstrap_list(nodes: Sequence[BrokerNode]) -> str:
    """What clients, the query service and the tools take as `--brokers`: every broker."""
    return ",".join(node.address for node in nodes)


def peers_of(node: BrokerNode, nodes: Sequence[BrokerNode]) -> tuple[Peer, ...]:
    """Every broker but `node`, in node id order."""
    return tuple(other.peer for other in nodes if other.node_id != node.node_id)


def broker_spec(node: BrokerNode, nodes: Sequence[BrokerNode], heartbeat_targets: str,
                secret_file: Path, metrics_port: int | None = None) -> BrokerSpec:
    """What `node` is started with (its command line: local_cluster.broker_argv). A cluster of
    one gets no `--peers`. The broker heartbeats under its default name, broker-<node id>. The
    cluster secret (peer frames, heartbeats) is named by its file, never given on the command
    line."""
    return BrokerSpec(node.node_id, node.data_dir, Address(node.host, node.port),
                      peers=peers_of(node, nodes), secret_file=secret_file,
                      metrics_listen=Address(node.host, metrics_port) if metrics_port else None,
                      heartbeat_targets=parse_host_ports(heartbeat_targets))


# --- readiness ----------------------------------------------------------------------------------


def listening_line(node_id: int) -> re.Pattern:
    return re.compile(rf"^kaska broker {node_id} listening on \S+:\d+$", re.MULTILINE)


def printed_listening(node: BrokerNode, log_path: Path) -> bool:
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return False
    return listening_line(node.node_id).search(text) is not None


def log_tail(log_path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log, for an error message."""
    try:
        tail = log_path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return f"no log at {log_path}"
    return f"last lines of {log_path}:\n" + "\n".join(f"    {line}" for line in tail)


def wait_until_listening(nodes: Sequence[BrokerNode], log_path: Callable[[str], Path],
                         exit_status: Callable[[str], int | None],
                         timeout_s: float = LISTEN_TIMEOUT_S,
                         clock: Callable[[], float] = time.monotonic,
                         sleep: Callable[[float], None] = time.sleep) -> float:
    """Seconds until every broker printed its listening line. Raises RunLocalError at once
    when a broker exits before it listens (`exit_status(name)`: the exit status of the process
    started for `name`, None while it runs), or after `timeout_s`."""
    started = clock()
    waiting = list(nodes)
    while True:
        waiting = [node for node in waiting if not printed_listening(node, log_path(node.name))]
        if not waiting:
            return clock() - started
        for node in waiting:
            status = exit_status(node.name)
            if status is not None and not printed_listening(node, log_path(node.name)):
                raise RunLocalError(f"{node.name} exited with status {status} before it "
                                    f"listened; {log_tail(log_path(node.name))}")
        if clock() - started > timeout_s:
            names = ", ".join(node.name for node in waiting)
            raise RunLocalError(f"{names} not listening after {timeout_s:g} s; "
                                f"{log_tail(log_path(waiting[0].name))}")
        sleep(POLL_S)


def short_admin(bootstrap: str) -> Admin:
    """An admin client whose calls give up after a few seconds (the leader wait retries)."""
    return Admin(bootstrap, request_timeout_s=ATTEMPT_REQUEST_TIMEOUT_S,
                 connect_timeout_s=ATTEMPT_CONNECT_TIMEOUT_S,
                 retry=RetryPolicy(retries_max=ATTEMPT_RETRIES_MAX))


def ensure_sessions_topic(admin: Admin) -> dict[str, int]:
    """Creates `sessions` (one partition) unless it exists; returns the topics."""
    try:
        admin.create_topic(SESSIONS_TOPIC, 1)
    except TopicAlreadyExistsError:
        pass  # kept broker data, or the query service was first
    return admin.topics()


def rotated(items: Sequence[str], start: int) -> list[str]:
    start %= len(items)
    return [*items[start:], *items[:start]]


def wait_for_leader(nodes: Sequence[BrokerNode], timeout_s: float = LEADER_TIMEOUT_S,
                    admin_factory: Callable[[str], Admin] = short_admin,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> float:
    """Seconds until the cluster took a write (module doc); RunLocalError after `timeout_s`.
    Each attempt gives the whole bootstrap list, starting from the next broker: a broker that
    knows no leader yet refuses, and the next attempt asks another one first."""
    started = clock()
    addresses = [node.address for node in nodes]
    attempt = 0
    while True:
        try:
            with admin_factory(",".join(rotated(addresses, attempt))) as admin:
                ensure_sessions_topic(admin)
            return clock() - started
        except KaskaError as error:
            last_error = error
        attempt += 1
        if clock() - started > timeout_s:
            raise RunLocalError(
                f"the {len(nodes)} broker(s) elected no leader in {timeout_s:g} s ({attempt} "
                f"attempts to create topic {SESSIONS_TOPIC!r}; the last: "
                f"{type(last_error).__name__}: {last_error}); see the brokers' logs")
        sleep(POLL_S)
