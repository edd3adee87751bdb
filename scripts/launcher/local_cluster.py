"""Brokers as child processes on 127.0.0.1: one broker's command line (`BrokerSpec`,
`broker_argv`), one broker process (`LocalBroker`) and a cluster of them (`LocalCluster`), for
the launcher, the nemesis, the benchmarks and the integration tests alike.

`LocalCluster(work, size=3)` picks every port up front (each broker is told the others'),
gives broker i the data directory `<work>/node<i>` and the log `<work>/node<i><log_suffix>`
(stderr, appended across restarts, with a line at every start and signal), starts the brokers
and lets its owner kill, pause, resume and restart them. With `peer_via_proxy=True` each broker
reaches each peer through its own `PeerProxy` (one per ordered pair), so a link can be cut
while clients still reach the broker directly. The brokers share a cluster secret
(`<work>/cluster_secret`, passed with `--secret-file`, its bytes in `LocalCluster.secret`).

Readiness: a broker prints `kaska broker <id> listening on <host>:<port>` once it serves
(services/broker/__main__.py), then, with a Kafka listener, `kafka listener PLAINTEXT of broker
<id> on <host>:<port>` (a spec's `kafka_listen`; listeners given in `extra_args` are the
owner's to read); `LocalBroker.wait_ready` reads them from its stdout (a port 0 is read back and
kept for restarts). Threads: none; a cluster is driven from one thread.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from common.address import Address, Peer, format_peers, parse_host_port
from common.cluster_secret import SECRET_ENV, write_secret_file
from scripts.nemesis.proxy import PeerProxy

REPO = Path(__file__).resolve().parents[2]
LOCALHOST = "127.0.0.1"
READY_TIMEOUT_S_DEFAULT = 30.0
STOP_TIMEOUT_S_DEFAULT = 20.0
# Environment a child broker must not inherit: its token and secret come from its flags only.
ENV_DROPPED = ("KASKA_TOKEN", SECRET_ENV)


class BrokerStartError(RuntimeError):
    """A broker exited, or did not print its listening line, when (re)started."""


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """What one broker is started with; every other broker flag goes in `extra_args`."""

    node_id: int
    data_dir: Path
    listen: Address = Address(LOCALHOST, 0)
    peers: tuple[Peer, ...] = ()
    secret_file: Path | None = None
    metrics_listen: Address | None = None
    kafka_listen: Address | None = None
    kafka_peers: tuple[Peer, ...] = ()
    heartbeat_targets: tuple[Address, ...] = ()
    extra_args: tuple[str, ...] = ()


def broker_argv(spec: BrokerSpec) -> list[str]:
    """`spec`'s command line after the interpreter: `-m services.broker --node-id ...`. The
    cluster secret is named by its file, never given on the command line."""
    argv = ["-m", "services.broker", "--node-id", str(spec.node_id),
            "--listen", str(spec.listen), "--data-dir", str(spec.data_dir)]
    if spec.peers:
        argv += ["--peers", format_peers(spec.peers)]
    if spec.secret_file is not None:
        argv += ["--secret-file", str(spec.secret_file)]
    if spec.metrics_listen is not None:
        argv += ["--metrics-listen", str(spec.metrics_listen)]
    if spec.kafka_listen is not None:
        argv += ["--kafka-listen", str(spec.kafka_listen)]
    if spec.kafka_peers:
        argv += ["--kafka-peers", format_peers(spec.kafka_peers)]
    if spec.heartbeat_targets:
        argv += ["--heartbeat-targets", ",".join(map(str, spec.heartbeat_targets))]
    return argv + list(spec.extra_args)


def reserve_ports(count: int) -> list[socket.socket]:
    """Bound (not listening) sockets on distinct free ports; close them right before use, so
    nothing else created meanwhile (proxies) can take the ports."""
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOCALHOST, 0))
        sockets.append(sock)
    return sockets


class LocalBroker:
    """One broker child process; its port (read back when 0) survives restarts."""

    def __init__(self, spec: BrokerSpec, log_path: Path, *, note_label: str = "harness",
                 ready_timeout_s: float = READY_TIMEOUT_S_DEFAULT,
                 stop_timeout_s: float = STOP_TIMEOUT_S_DEFAULT,
                 env_dropped: tuple[str, ...] = ENV_DROPPED) -> None:
        """`env_dropped`: environment variables the broker does not inherit."""
        self.spec = spec
        self.env_dropped = env_dropped
        self.log_path = log_path
        self.note_label = note_label
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.starts = 0

    @property
    def node_id(self) -> int:
        return self.spec.node_id

    @property
    def data_dir(self) -> Path:
        return self.spec.data_dir

    @property
    def port(self) -> int:
        return self.spec.listen.port

    @property
    def address(self) -> str:
        return str(self.spec.listen)

    @property
    def host_port(self) -> tuple[str, int]:
        return self.spec.listen.host, self.spec.listen.port

    @property
    def kafka_address(self) -> str:
        return str(self.spec.kafka_listen)

    @property
    def metrics_port(self) -> int | None:
        return self.spec.metrics_listen.port if self.spec.metrics_listen else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    running = alive

    def note(self, text: str) -> None:
        """A line in the broker's log, so the log reads as a timeline of its owner's doings."""
        with open(self.log_path, "a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} ===== {self.note_label}: {text} =====\n")

    def launch(self) -> None:
        """Start the process; `wait_ready` reads its readiness line."""
        assert not self.alive(), f"broker {self.node_id} runs already"
        env = {key: value for key, value in os.environ.items() if key not in self.env_dropped}
        env["PYTHONPATH"] = str(REPO)
        self.starts += 1
        self.note(f"start #{self.starts}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, *broker_argv(self.spec)], cwd=REPO,
                                         env=env, stdout=subprocess.PIPE, stderr=log)
        self.paused = False

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Read the listening line (and the Kafka listener's); keep the ports they name."""
        line = self._ready_line(self.ready_timeout_s if timeout_s is None else timeout_s)
        listen = parse_host_port(line.rsplit(" ", 1)[1])
        if self.port not in (0, listen.port):
            raise BrokerStartError(f"broker {self.node_id} listens on {listen.port}, not "
                                   f"{self.port}")
        self.spec = replace(self.spec, listen=Address(self.spec.listen.host, listen.port))
        if self.spec.kafka_listen is not None:
            # Printed right after the readiness line, which may have buffered it already (so no
            # select on the pipe); a broker dying in between ends the pipe: "" below.
            kafka_line = self.proc.stdout.readline().decode(errors="replace").strip()
            if not kafka_line.startswith("kafka listener PLAINTEXT of broker"):
                raise BrokerStartError(f"broker {self.node_id}: no Kafka listener line "
                                       f"({kafka_line!r}): {self.tail()}")
            kafka = parse_host_port(kafka_line.rsplit(" ", 1)[1])
            self.spec = replace(self.spec,
                                kafka_listen=Address(self.spec.kafka_listen.host, kafka.port))

    def _ready_line(self, timeout_s: float) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout_s)
        line = self.proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        if "listening on" not in line:
            self.kill()
            raise BrokerStartError(f"broker {self.node_id} failed to start within {timeout_s:g} s "
                                   f"(printed {line!r}): {self.tail()}")
        return line

    def start(self) -> LocalBroker:
        self.launch()
        self.wait_ready()
        return self

    def tail(self, nbytes: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-nbytes:].decode(errors="replace")
        except FileNotFoundError:
            return f"no log at {self.log_path}"

    def signal(self, signum: int) -> None:
        self.note(f"signal {signal.Signals(signum).name}")
        self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float | None = None) -> int:
        try:
            return self.proc.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
        finally:
            self.proc.stdout.close()
            self.paused = False

    def terminate(self, timeout_s: float | None = None) -> tuple[int, float]:
        """SIGTERM (a paused broker is thawed to handle it); (exit code, seconds it took)."""
        started = time.monotonic()
        self.signal(signal.SIGTERM)
        if self.paused:
            self.proc.send_signal(signal.SIGCONT)
        return self.wait_exit(timeout_s), time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL whatever runs and reap it (teardown; idempotent)."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()
        self.paused = False

    def restart(self) -> LocalBroker:
        """SIGTERM (when running; it must exit 0), then start again on the same port."""
        if self.alive():
            code, _ = self.terminate()
            if code != 0:
                raise BrokerStartError(f"broker {self.node_id} exited {code} on SIGTERM: "
                                       f"{self.tail()}")
        return self.start()


class LocalCluster:
    def __init__(self, work: Path, size: int = 3, *, peer_via_proxy: bool = False,
                 extra_args: tuple[str, ...] = (), kafka: bool = False, metrics: bool = True,
                 log_suffix: str = ".broker.log", note_label: str = "harness",
                 ready_timeout_s: float = READY_TIMEOUT_S_DEFAULT,
                 stop_timeout_s: float = STOP_TIMEOUT_S_DEFAULT) -> None:
        """With `metrics` every broker serves /metrics on its own port (`metrics_ports`); with
        `kafka` also Kafka's protocol on another (`kafka_ports`), each told the others'
        (--kafka-peers). `extra_args`: further broker flags, the same for every broker."""
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.secret = write_secret_file(work / "cluster_secret")
        self.ids = list(range(1, size + 1))
        self.peer_via_proxy = peer_via_proxy
        reserved = reserve_ports((3 if kafka else 2) * size)
        ports = [sock.getsockname()[1] for sock in reserved]
        # Held until the brokers are planned: nothing else (proxies) can take them.
        client_ports = dict(zip(self.ids, ports[:size], strict=True))
        self.metrics_ports = dict(zip(self.ids, ports[size:2 * size], strict=True))
        self.kafka_ports = dict(zip(self.ids, ports[2 * size:], strict=True)) if kafka else {}
        self.proxies: dict[tuple[int, int], PeerProxy] = {}
        if peer_via_proxy:
            self.proxies = {(i, j): PeerProxy((LOCALHOST, client_ports[j]), name=f"{i}->{j}")
                            for i in self.ids for j in self.ids if i != j}
        self.brokers: dict[int, LocalBroker] = {}
        for i in self.ids:
            spec = BrokerSpec(
                i, work / f"node{i}", Address(LOCALHOST, client_ports[i]),
                peers=tuple(Peer(j, *self._peer_address(i, j, client_ports))
                            for j in self.others(i)),
                secret_file=work / "cluster_secret",
                metrics_listen=Address(LOCALHOST, self.metrics_ports[i]) if metrics else None,
                kafka_listen=Address(LOCALHOST, self.kafka_ports[i]) if kafka else None,
                kafka_peers=tuple(Peer(j, LOCALHOST, self.kafka_ports[j])
                                  for j in self.others(i)) if kafka else (),
                extra_args=extra_args)
            self.brokers[i] = LocalBroker(spec, work / f"node{i}{log_suffix}",
                                          note_label=note_label, ready_timeout_s=ready_timeout_s,
                                          stop_timeout_s=stop_timeout_s)
        for sock in reserved:
            sock.close()

    def _peer_address(self, i: int, j: int, client_ports: dict[int, int]) -> Address:
        if self.peer_via_proxy:
            return parse_host_port(self.proxies[(i, j)].address)
        return Address(LOCALHOST, client_ports[j])

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Start every broker at once (each waits for nobody to listen), then wait for each
        to listen."""
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.wait_ready()
        return self

    def __enter__(self) -> LocalCluster:
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
        self.brokers[i].signal(signal.SIGSTOP)
        self.brokers[i].paused = True

    def resume(self, i: int) -> None:
        self.brokers[i].signal(signal.SIGCONT)
        self.brokers[i].paused = False

    def start_broker(self, i: int) -> None:
        """Start a broker that is not running, on its own port and data directory."""
        assert not self.brokers[i].alive(), f"broker {i} is running"
        self.brokers[i].start()

    def restart(self, i: int) -> None:
        """SIGTERM (when running; it must exit 0), then start again."""
        self.brokers[i].restart()

    def stop_all(self) -> dict[int, int | None]:
        """SIGTERM every running broker at once (thawing paused ones), wait; each exit code
        (None: it had to be killed)."""
        running = [i for i in self.ids if self.brokers[i].alive()]
        for i in running:
            self.brokers[i].signal(signal.SIGTERM)
            if self.brokers[i].paused:
                self.brokers[i].proc.send_signal(signal.SIGCONT)
        codes: dict[int, int | None] = {}
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

    def kafka_address(self, i: int) -> str:
        """Broker i's Kafka listener, "127.0.0.1:port" (a cluster made with `kafka=True`)."""
        return f"{LOCALHOST}:{self.kafka_ports[i]}"

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

    def log_paths(self) -> dict[int, Path]:
        return {i: broker.log_path for i, broker in self.brokers.items()}
