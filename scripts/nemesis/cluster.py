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
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from scripts.launcher.local_cluster import LocalCluster

READY_TIMEOUT_S = 90.0  # a loaded machine and a long journal replay
STOP_TIMEOUT_S = 60.0
SCRAPE_TIMEOUT_S = 5.0
BROKER_ARGS = ("--election-timeout-ms-min", "500", "--election-timeout-ms-max", "1000",
               "--quorum-timeout-ms", "1500")
# Small enough that a round compacts (snapshots, snapshot installs), large enough that a
# follower paused for a few seconds catches up from entries (a leader keeps half of it for a
# lagging follower), the path where an entry's topic incarnation matters.
JOURNAL_ENTRIES_MAX_DEFAULT = 1000


@dataclass(frozen=True, slots=True)
class Readings:
    """One broker's replication and partition state from its metrics."""

    groups: dict[int, tuple[int, int]]  # group -> (journal end index, commit index)
    partitions: dict[tuple[str, int], tuple[int, int]]  # (topic, p) -> (log end, high watermark)


class NemesisCluster(LocalCluster):
    def __init__(self, work: Path, size: int, groups: int | None,
                 journal_entries_max: int = JOURNAL_ENTRIES_MAX_DEFAULT) -> None:
        """`groups`: --replication-groups (None: the broker's default, one per broker)."""
        self.groups = groups if groups is not None else size
        super().__init__(work, size, peer_via_proxy=True, log_suffix=".log",
                         note_label="nemesis", ready_timeout_s=READY_TIMEOUT_S,
                         stop_timeout_s=STOP_TIMEOUT_S,
                         extra_args=(*BROKER_ARGS, "--journal-entries-max",
                                     str(journal_entries_max),
                                     "--replication-groups", str(self.groups)))
        self.killed: set[int] = set()  # brokers the nemesis stopped and has not restarted

    # -- faults ------------------------------------------------------------------------------

    def kill(self, i: int) -> None:
        super().kill(i)
        self.killed.add(i)

    def wipe(self, i: int) -> None:
        """SIGKILL, then remove the data directory: the broker comes back empty."""
        self.kill(i)
        self.brokers[i].note("data directory wiped")
        shutil.rmtree(self.brokers[i].data_dir, ignore_errors=True)

    def restart(self, i: int) -> None:
        """Start a stopped broker again (no SIGTERM first: the nemesis restarts what it
        killed)."""
        self.killed.discard(i)
        self.brokers[i].start()

    def unexpected_exits(self) -> dict[int, int]:
        """Brokers that exited though the nemesis did not stop them: their exit codes (each
        reported once: the broker then counts as stopped)."""
        exited = {i: broker.proc.returncode for i, broker in self.brokers.items()
                  if i not in self.killed and not broker.running()}
        self.killed.update(exited)
        return exited

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
