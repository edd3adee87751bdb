"""The nemesis's cluster: N real broker processes on 127.0.0.1, each reaching each peer through
its own `PeerProxy` (one per ordered pair, so a link can be cut), and the faults done to them.

Every broker gets fast elections (0.5-1 s), a short quorum timeout (1.5 s) and a small
journal bound so that compaction (snapshots, snapshot installs) happens within a round.
Brokers log to `<work>/node<I>.log`, appended across restarts, with a nemesis line at every
start, signal and cut, so a log reads as the timeline of the round. `readings()` scrapes
every live broker's /metrics: what the convergence check compares.

Invariants: a broker is either running (maybe paused) or stopped; `heal_all` leaves every
broker running, thawed and connected. Thread-safety: the fault methods are called from the
runner's thread only; `readings` and `cpu_s` from any.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from common.cluster_secret import SECRET_ENV, write_secret_file
from scripts.launcher.ports import free_ports
from scripts.nemesis.proxy import PeerProxy

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 90.0  # a loaded machine and a long journal replay
STOP_TIMEOUT_S = 60.0
SCRAPE_TIMEOUT_S = 5.0
BROKER_ARGS = ("--election-timeout-ms-min", "500", "--election-timeout-ms-max", "1000",
               "--quorum-timeout-ms", "1500")
# Small enough that a round compacts (snapshots, snapshot installs), large enough that a
# follower paused for a few seconds catches up from entries (a leader keeps half of it for a
# lagging follower), the path where an entry's topic incarnation matters.
JOURNAL_ENTRIES_MAX_DEFAULT = 1000


class BrokerStartError(RuntimeError):
    """A broker exited, or did not print its listening line, when (re)started."""


@dataclass(frozen=True, slots=True)
class Readings:
    """One broker's replication and partition state from its metrics."""

    groups: dict[int, tuple[int, int]]  # group -> (journal end index, commit index)
    partitions: dict[tuple[str, int], tuple[int, int]]  # (topic, p) -> (log end, high watermark)


class Broker:
    """One broker process: its command line, its data directory, its state."""

    def __init__(self, node_id: int, work: Path, port: int, metrics_port: int,
                 argv_tail: list[str]) -> None:
        self.node_id = node_id
        self.port = port
        self.metrics_port = metrics_port
        self.data_dir = work / f"node{node_id}"
        self.log_path = work / f"node{node_id}.log"
        self.argv = [sys.executable, "-m", "services.broker", "--node-id", str(node_id),
                     "--listen", f"127.0.0.1:{port}", "--data-dir", str(self.data_dir),
                     "--metrics-listen", f"127.0.0.1:{metrics_port}", *argv_tail]
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def note(self, text: str) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} ===== nemesis: {text} =====\n")

    def launch(self) -> None:
        assert not self.running(), f"broker {self.node_id} runs already"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("KASKA_TOKEN", None)
        env.pop(SECRET_ENV, None)
        self.starts += 1
        self.note(f"start #{self.starts}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                         stderr=log)
        self.paused = False

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout_s)
        line = self.proc.stdout.readline().decode(errors="replace") if ready else ""
        if "listening on" not in line:
            raise BrokerStartError(f"broker {self.node_id} did not start within "
                                   f"{timeout_s:g} s (printed {line!r}); see {self.log_path}")

    def signal(self, signum: int) -> None:
        self.note(f"signal {signal.Signals(signum).name}")
        self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self.proc.stdout.close()
            self.paused = False


class NemesisCluster:
    def __init__(self, work: Path, size: int, groups: int | None,
                 journal_entries_max: int = JOURNAL_ENTRIES_MAX_DEFAULT) -> None:
        """`groups`: --replication-groups (None: the broker's default, one per broker)."""
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.ids = list(range(1, size + 1))
        self.groups = groups if groups is not None else size
        secret_file = work / "cluster_secret"
        write_secret_file(secret_file)
        ports = free_ports(2 * size)
        client_ports = dict(zip(self.ids, ports[:size], strict=True))
        self.proxies = {(i, j): PeerProxy(("127.0.0.1", client_ports[j]), f"{i}->{j}")
                        for i in self.ids for j in self.ids if i != j}
        self.killed: set[int] = set()  # brokers the nemesis stopped and has not restarted
        self.brokers: dict[int, Broker] = {}
        for i, metrics_port in zip(self.ids, ports[size:], strict=True):
            peers = ",".join(f"{j}@{self.proxies[(i, j)].address}" for j in self.ids if j != i)
            tail = ["--peers", peers, "--secret-file", str(secret_file), *BROKER_ARGS,
                    "--journal-entries-max", str(journal_entries_max),
                    "--replication-groups", str(self.groups)]
            self.brokers[i] = Broker(i, work, client_ports[i], metrics_port, tail)

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.address for broker in self.brokers.values())

    def start(self) -> None:
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.wait_ready()

    # -- faults ------------------------------------------------------------------------------

    def kill(self, i: int) -> None:
        broker = self.brokers[i]
        broker.signal(signal.SIGKILL)
        broker.wait_exit()
        self.killed.add(i)

    def wipe(self, i: int) -> None:
        """SIGKILL, then remove the data directory: the broker comes back empty."""
        self.kill(i)
        self.brokers[i].note("data directory wiped")
        shutil.rmtree(self.brokers[i].data_dir, ignore_errors=True)

    def restart(self, i: int) -> None:
        broker = self.brokers[i]
        self.killed.discard(i)
        broker.launch()
        broker.wait_ready()

    def unexpected_exits(self) -> dict[int, int]:
        """Brokers that exited though the nemesis did not stop them: their exit codes (each
        reported once: the broker then counts as stopped)."""
        exited = {i: broker.proc.returncode for i, broker in self.brokers.items()
                  if i not in self.killed and not broker.running()}
        self.killed.update(exited)
        return exited

    def pause(self, i: int) -> None:
        self.brokers[i].signal(signal.SIGSTOP)
        self.brokers[i].paused = True

    def resume(self, i: int) -> None:
        self.brokers[i].signal(signal.SIGCONT)
        self.brokers[i].paused = False

    def links_of(self, brokers: tuple[int, ...]) -> list[tuple[int, int]]:
        """One broker: every link to and from it; two: both directions between them."""
        if len(brokers) == 1:
            (b,) = brokers
            return [pair for pair in self.proxies if b in pair]
        a, b = brokers
        return [(a, b), (b, a)]

    def cut(self, brokers: tuple[int, ...]) -> None:
        for i, j in self.links_of(brokers):
            self.brokers[i].note(f"link {i}->{j} cut")
            self.proxies[(i, j)].cut()

    def heal(self, brokers: tuple[int, ...]) -> None:
        for i, j in self.links_of(brokers):
            self.brokers[i].note(f"link {i}->{j} healed")
            self.proxies[(i, j)].heal()

    def heal_all(self) -> None:
        """Every broker running, thawed and connected."""
        for proxy in self.proxies.values():
            proxy.heal()
        for i, broker in self.brokers.items():
            if broker.running() and broker.paused:
                self.resume(i)
            if not broker.running():
                self.restart(i)

    def stop_all(self) -> dict[int, int | None]:
        """SIGTERM every running broker at once; each exit code (None: had to be killed)."""
        running = [b for b in self.brokers.values() if b.running()]
        for broker in running:
            if broker.paused:
                broker.signal(signal.SIGCONT)
            broker.signal(signal.SIGTERM)
        codes: dict[int, int | None] = {}
        for broker in running:
            try:
                codes[broker.node_id] = broker.wait_exit()
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                broker.proc.wait()
                codes[broker.node_id] = None
        return codes

    def close(self) -> None:
        """Kill whatever still runs and close the proxies (teardown; idempotent)."""
        for broker in self.brokers.values():
            if broker.running():
                broker.proc.kill()
                broker.proc.wait()
            if broker.proc is not None and not broker.proc.stdout.closed:
                broker.proc.stdout.close()
        for proxy in self.proxies.values():
            proxy.close()

    # -- observation -------------------------------------------------------------------------

    def readings(self, i: int) -> Readings | None:
        """Broker i's metrics; None when it does not answer (stopped, paused, starting)."""
        url = f"http://127.0.0.1:{self.brokers[i].metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as answer:
                text = answer.read().decode()
        except (OSError, urllib.error.URLError):
            return None
        groups: dict[int, list[int]] = {}
        partitions: dict[tuple[str, int], list[int]] = {}
        group_slots = {"kaska_replication_journal_end_index": 0,
                       "kaska_replication_commit_index": 1}
        partition_slots = {"kaska_partition_log_end_offset": 0,
                           "kaska_partition_high_watermark": 1}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in group_slots:
                    slot = groups.setdefault(int(sample.labels["group"]), [0, 0])
                    slot[group_slots[sample.name]] = int(sample.value)
                elif sample.name in partition_slots:
                    key = (sample.labels["topic"], int(sample.labels["partition"]))
                    partitions.setdefault(key, [0, 0])[partition_slots[sample.name]] = \
                        int(sample.value)
        return Readings({g: (end, commit) for g, (end, commit) in groups.items()},
                        {key: (end, hw) for key, (end, hw) in partitions.items()})

    def cpu_s(self, i: int) -> float:
        """User + system CPU seconds broker i's current process has used."""
        fields = Path(f"/proc/{self.brokers[i].proc.pid}/stat").read_text() \
            .rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
