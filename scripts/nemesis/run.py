"""One nemesis round: the cluster started, the workload run under the seeded schedule, then
healed and judged.

After the schedule every fault is undone (all brokers running, thawed, connected), the churner
finishes, the clients stop, and the round is judged:
1. convergence: within `converge_timeout_s` every broker reports, for every replication
   group, its journal end equal to its commit index and to every other broker's, and for
   every partition the same log end offset and high watermark (a wedged replica never does);
2. the final read: every partition of every topic read from its start to its end;
3. idleness: each broker's user + system CPU over `idle_window_s` with no client at all must
   stay at or below `idle_cpu_s_max` (a replica spinning on a fetch it can never satisfy
   does not);
4. the brokers stopped with SIGTERM (each must exit 0), every replica's bytes compared
   (replicas.py), every log searched for a refused truncation below the commit index;
5. the history checker (history.py).
Every finding is collected; the report carries them, the schedule and the figures.
Threads: the caller's runs the schedule; the clients run in their own (workload.py).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common.kaska import Consumer
from common.kaska.errors import KaskaError
from scripts.launcher.local_cluster import BrokerStartError
from scripts.nemesis import schedule
from scripts.nemesis.cluster import JOURNAL_ENTRIES_MAX_DEFAULT, NemesisCluster
from scripts.nemesis.history import FINAL_READER, Finding, History, ReadRecord, check, counts
from scripts.nemesis.replicas import compare_replicas
from scripts.nemesis.workload import (
    CHURN_TIMEOUT_S,
    CLIENT_OPTIONS,
    Churner,
    ConsumerLoop,
    ProducerLoop,
    Stats,
    TopicGate,
    WorkloadShape,
    create_topics,
)

THREAD_STOP_TIMEOUT_S = 180.0
FINAL_READ_TIMEOUT_S = 120.0
CONVERGE_POLL_S = 0.5
# A broker asked to drop committed entries: never legitimate.
SAFETY_LINE = re.compile(r"refusing to truncate|below the commit index")
# What the brokers' logs say happened (the summary's figures: the round reached these paths).
EVENT_LINES = {"compactions": re.compile(r"journal compacted below"),
               "snapshot_installs": re.compile(r"installed leader \d+'s snapshot"),
               "elections_won": re.compile(r": leader of epoch")}


@dataclass(frozen=True)
class NemesisSettings:
    seed: int
    work_dir: Path
    seconds: float = 300.0
    brokers: int = 3
    groups: int | None = None  # --replication-groups; None: one per broker
    topics: int = 3
    partitions: int = 2
    producers: int = 3
    consumers: int = 2
    fault_interval_s: float = 3.0
    journal_entries_max: int = JOURNAL_ENTRIES_MAX_DEFAULT
    converge_timeout_s: float = 120.0
    idle_window_s: float = 5.0
    idle_cpu_s_max: float = 0.5

    @property
    def topic_names(self) -> tuple[str, ...]:
        return tuple(f"nemesis-{k}" for k in range(self.topics))

    def plan(self) -> schedule.SchedulePlan:
        return schedule.SchedulePlan(self.seconds, self.brokers, self.topic_names,
                                     self.fault_interval_s)


@dataclass
class NemesisReport:
    settings: NemesisSettings
    faults: list[schedule.Fault]
    findings: list[Finding] = field(default_factory=list)
    actions_done: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0
    acknowledged_checked: int = 0
    reads_checked: int = 0
    attempts: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # produce attempts by outcome
    read_errors: int = 0  # consumer reads that failed during the round (then resumed)
    broker_events: dict[str, int] = field(default_factory=dict)  # EVENT_LINES counted
    topics_churned: int = 0
    partitions_compared: int = 0
    converge_s: float | None = None
    idle_cpu_s: dict[int, float] = field(default_factory=dict)
    wall_s: float = 0.0

    def summary(self) -> dict:
        return {"seed": self.settings.seed, "seconds": self.settings.seconds,
                "brokers": self.settings.brokers,
                "groups": self.settings.groups or self.settings.brokers,
                "fault_interval_s": self.settings.fault_interval_s,
                "journal_entries_max": self.settings.journal_entries_max,
                "faults": schedule.count_by_kind(self.faults),
                "actions_done": self.actions_done,
                "produce_attempts": self.attempts,
                "produce_outcomes": self.outcomes,
                "read_errors": self.read_errors,
                "broker_events": self.broker_events,
                "records_acknowledged": self.acknowledged,
                "records_checked": self.acknowledged_checked,
                "reads_checked": self.reads_checked,
                "topics_churned": self.topics_churned,
                "partitions_compared": self.partitions_compared,
                "converge_s": None if self.converge_s is None else round(self.converge_s, 1),
                "idle_cpu_s": {str(i): round(s, 3) for i, s in self.idle_cpu_s.items()},
                "findings": len(self.findings),
                "wall_s": round(self.wall_s, 1),
                "work_dir": str(self.settings.work_dir)}


def run_nemesis(settings: NemesisSettings, progress=print) -> NemesisReport:
    """One round (module docstring); `progress(text)` hears what it is doing."""
    started = time.monotonic()
    faults = schedule.plan_faults(settings.plan(), settings.seed)
    report = NemesisReport(settings, faults)
    cluster = NemesisCluster(settings.work_dir, settings.brokers, settings.groups,
                             settings.journal_entries_max)
    try:
        progress(f"starting {settings.brokers} brokers in {settings.work_dir}")
        cluster.start()
        _run_and_judge(settings, cluster, faults, report, progress)
    finally:
        cluster.close()
        report.wall_s = time.monotonic() - started
    return report


def _run_and_judge(settings: NemesisSettings, cluster: NemesisCluster,
                   faults: list[schedule.Fault], report: NemesisReport, progress) -> None:
    shape = WorkloadShape(cluster.bootstrap, settings.topic_names, settings.partitions,
                          settings.producers, settings.consumers, settings.seed)
    create_topics(shape)
    history = History()
    gate = TopicGate(shape.topics)
    stats = Stats()
    stop = threading.Event()
    churner = Churner(shape, gate, stats)
    clients = [ProducerLoop(k, shape, gate, history, stop) for k in range(shape.producers)]
    clients += [ConsumerLoop(k, shape, gate, history, stats, stop)
                for k in range(shape.consumers)]
    for thread in (churner, *clients):
        thread.start()
    progress(f"running {len(faults)} faults over {settings.seconds:g} s (seed {settings.seed})")
    _play(cluster, schedule.actions_of(faults), settings.seconds, churner, report)
    progress("healing")
    _heal(cluster, report)
    churner.finish()
    churner.join(CHURN_TIMEOUT_S + THREAD_STOP_TIMEOUT_S)
    stop.set()
    for thread in (churner, *clients):
        thread.join(THREAD_STOP_TIMEOUT_S)
        if thread.is_alive() or not thread.finished:
            how = "did not stop" if thread.is_alive() else "died (its traceback is above)"
            report.findings.append(Finding("client thread", f"{thread.name} {how}"))
    report.findings += [Finding("churn stalled", text) for text in stats.churn_errors]
    report.topics_churned = len(stats.churned)
    report.read_errors = stats.read_errors
    _judge(settings, cluster, shape, gate, history, report, progress)


def _play(cluster: NemesisCluster, actions: list[schedule.Action], seconds: float,
          churner: Churner, report: NemesisReport) -> None:
    t0 = time.monotonic()
    for action in actions:
        time.sleep(max(0.0, t0 + action.at_s - time.monotonic()))
        _note_exits(cluster, report)
        try:
            _execute(cluster, action, churner)
        except BrokerStartError as error:
            report.findings.append(Finding("broker did not restart", str(error)))
        report.actions_done[action.verb] = report.actions_done.get(action.verb, 0) + 1
    time.sleep(max(0.0, t0 + seconds - time.monotonic()))


def _execute(cluster: NemesisCluster, action: schedule.Action, churner: Churner) -> None:
    verb = action.verb
    if verb == "churn":
        churner.churn(action.topic)
    elif verb in ("cut", "heal"):
        getattr(cluster, verb)(action.brokers)
    else:
        (broker,) = action.brokers
        getattr(cluster, verb)(broker)  # kill, wipe, restart, pause, resume


def _note_exits(cluster: NemesisCluster, report: NemesisReport) -> None:
    for i, code in cluster.unexpected_exits().items():
        report.findings.append(Finding("broker exited", f"broker {i} exited {code} on its "
                                       f"own; see {cluster.brokers[i].log_path}"))


def _heal(cluster: NemesisCluster, report: NemesisReport) -> None:
    _note_exits(cluster, report)
    try:
        cluster.heal_all()
    except BrokerStartError as error:
        report.findings.append(Finding("broker did not restart", str(error)))


def _judge(settings: NemesisSettings, cluster: NemesisCluster, shape: WorkloadShape,
           gate: TopicGate, history: History, report: NemesisReport, progress) -> None:
    progress("waiting for convergence")
    report.converge_s = _wait_converged(cluster, settings.converge_timeout_s, report)
    progress("final read")
    history.final_incarnations = gate.incarnations()
    _final_read(shape, history, report)
    progress(f"idle CPU over {settings.idle_window_s:g} s")
    _check_idle(cluster, settings, report)
    progress("stopping the brokers, comparing replicas")
    _note_exits(cluster, report)
    for i, code in cluster.stop_all().items():
        if code != 0:
            log_path = cluster.brokers[i].log_path
            report.findings.append(Finding("unclean stop", f"broker {i} exited {code} on "
                                                           f"SIGTERM; see {log_path}"))
    replica_findings, report.partitions_compared = compare_replicas(
        {i: broker.data_dir for i, broker in cluster.brokers.items()}, cluster.groups)
    report.findings += replica_findings
    report.findings += _safety_lines(cluster)
    report.broker_events = _count_events(cluster)
    report.findings += check(history)
    figures = counts(history)
    report.attempts = len(history.attempts)
    report.outcomes = dict(Counter(attempt.outcome for attempt in history.attempts))
    report.acknowledged = figures.acknowledged
    report.acknowledged_checked = figures.acknowledged_checked
    report.reads_checked = figures.reads_checked


def converged(readings: dict) -> bool:
    """Every broker answered and they all hold the same committed groups and partitions."""
    if any(reading is None for reading in readings.values()):
        return False
    first, *others = readings.values()
    return (all(end == commit for end, commit in first.groups.values())
            and all(end == hw for end, hw in first.partitions.values())
            and all(other == first for other in others))


def _wait_converged(cluster: NemesisCluster, timeout_s: float,
                    report: NemesisReport) -> float | None:
    started = time.monotonic()
    while True:
        readings = {i: cluster.readings(i) for i in cluster.ids}
        if converged(readings):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            report.findings.append(Finding("no convergence", _describe_readings(readings,
                                                                                timeout_s)))
            return None
        time.sleep(CONVERGE_POLL_S)


def _describe_readings(readings: dict, timeout_s: float) -> str:
    lines = [f"replicas still differ {timeout_s:g} s after the heal:"]
    for i, reading in readings.items():
        if reading is None:
            lines.append(f"  broker {i}: no answer")
            continue
        groups = " ".join(f"g{g}:end={end},commit={commit}"
                          for g, (end, commit) in sorted(reading.groups.items()))
        parts = " ".join(f"{t}/{p}:end={end},hw={hw}"
                         for (t, p), (end, hw) in sorted(reading.partitions.items()))
        lines.append(f"  broker {i}: {groups} | {parts}")
    return "\n".join(lines)


def _final_read(shape: WorkloadShape, history: History, report: NemesisReport) -> None:
    for topic in shape.topics:
        incarnation = history.final_incarnations[topic]
        for partition in range(shape.partitions):
            try:
                _read_partition(shape, topic, partition, incarnation, history)
            except (KaskaError, TimeoutError) as error:
                report.findings.append(Finding("final read failed", f"{topic}/{partition}: "
                                               f"{type(error).__name__}: {error}"))


def _read_partition(shape: WorkloadShape, topic: str, partition: int, incarnation: int,
                    history: History) -> None:
    with Consumer(shape.bootstrap, **CLIENT_OPTIONS) as consumer:
        end = consumer.end_offset(topic, partition)
        consumer.seek(topic, consumer.start_offset(topic, partition), partition)
        deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
        while consumer.position(topic, partition) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read up to {consumer.position(topic, partition)} of "
                                   f"{end} within {FINAL_READ_TIMEOUT_S:g} s")
            message = consumer.poll(1.0)
            if message is not None:
                history.reads.append(ReadRecord(FINAL_READER, topic, partition, incarnation,
                                                message.offset, message.value))


def _check_idle(cluster: NemesisCluster, settings: NemesisSettings,
                report: NemesisReport) -> None:
    before = {i: cluster.cpu_s(i) for i in cluster.ids}
    time.sleep(settings.idle_window_s)
    report.idle_cpu_s = {i: cluster.cpu_s(i) - before[i] for i in cluster.ids}
    for i, used_s in report.idle_cpu_s.items():
        if used_s > settings.idle_cpu_s_max:
            report.findings.append(Finding(
                "busy while idle", f"broker {i} used {used_s:.2f} CPU-s in "
                f"{settings.idle_window_s:g} s with no client (bound "
                f"{settings.idle_cpu_s_max:g})"))


def _safety_lines(cluster: NemesisCluster) -> list[Finding]:
    findings = []
    for i, broker in cluster.brokers.items():
        text = broker.log_path.read_text(errors="replace") if broker.log_path.exists() else ""
        findings += [Finding("safety", f"broker {i}: {line.strip()}")
                     for line in text.splitlines() if SAFETY_LINE.search(line)]
    return findings


def _count_events(cluster: NemesisCluster) -> dict[str, int]:
    found = dict.fromkeys(EVENT_LINES, 0)
    for broker in cluster.brokers.values():
        if not broker.log_path.exists():
            continue
        for line in broker.log_path.read_text(errors="replace").splitlines():
            for name, pattern in EVENT_LINES.items():
                if pattern.search(line):
                    found[name] += 1
    return found
