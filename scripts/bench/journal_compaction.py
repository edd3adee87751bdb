"""Start time and memory of a broker whose replication journal holds many entries, before and
after compaction: the library of `python -m scripts.bench_journal_compaction`
(scripts/bench_journal_compaction.py says what is measured; docs/benchmarks.md the results).

Owns the data directory a long-lived broker leaves (`build`), one timed start (`trial`) and
the whole comparison (`bench`).
Invariants: every broker is a child process on 127.0.0.1 with the data directory built here,
removed when `bench` returns; the compacting start waits (bounded) for the broker to log
"journal compacted below N".
Threads: the caller's.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common.kaska.record_batch import encode_batch
from scripts.bench import child as bench_child
from scripts.bench.child import Child
from scripts.bench.process_stats import cpu_seconds
from scripts.launcher.local_cluster import BrokerSpec, broker_argv
from services.broker.replication.journal import Journal, JournalEntry
from services.broker.replication.node import REPLICATION_DIR
from services.broker.replication.quorum_store import (
    AppliedStore,
    CommitStore,
    QuorumState,
    QuorumStore,
)
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

TOPIC = "bench"
EPOCH = 1
COMPACTION_TIMEOUT_S = 300.0
START_TIMEOUT_S = 600.0  # a broker replaying a million entries on a loaded machine is slow
# Small segments: recovery rescans the active segment batch by batch (storage/segment.py), which
# with one 80 MB segment of tiny batches would dwarf what the journal costs.
SEGMENT_BYTES_MAX = 4 * 1024 * 1024
COMPACTED = re.compile(r"journal compacted below (\d+)")


def build(data_dir: Path, entries: int) -> None:
    directory = data_dir / REPLICATION_DIR
    journal = Journal(directory)
    log = Log(data_dir, LogConfig(segment_bytes_max=SEGMENT_BYTES_MAX,
                                  batch_bytes_max=SEGMENT_BYTES_MAX // 2))
    try:
        journal.append_replica(JournalEntry(0, EPOCH, EntryKind.NOOP))
        journal.append_replica(JournalEntry(1, EPOCH, EntryKind.CREATE_TOPIC, TOPIC,
                                            partitions=1))
        log.create_topic(TOPIC, 1)
        partition = log.partition(TOPIC, 0)
        batch = encode_batch([b"x" * 16], timestamp_ms=1_000)
        for _ in range(entries):
            result = partition.append(batch)
            journal.append_replica(JournalEntry(journal.end, EPOCH, EntryKind.BATCH, TOPIC, 0,
                                                result.base_offset, result.record_count,
                                                batch_bytes=len(batch)))
        journal.flush()
        end = journal.end
    finally:
        journal.close()
        log.close()
    QuorumStore(directory).save(QuorumState(EPOCH, None))
    CommitStore(directory).save(end)
    AppliedStore(directory).save(end)


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def start(data_dir: Path, log_path: Path, extra: list[str]) -> tuple[Child, float]:
    began = time.perf_counter()
    spec = BrokerSpec(1, data_dir, extra_args=("--segment-bytes-max", str(SEGMENT_BYTES_MAX),
                                                *extra))
    child = Child([sys.executable, *broker_argv(spec)], log_path)
    return child, time.perf_counter() - began


def trial(data_dir: Path, log_path: Path, extra: list[str]) -> dict:
    child, seconds = start(data_dir, log_path, extra)
    try:
        memory = memory_kib(child.proc.pid)
        cpu_s = cpu_seconds(child.proc.pid)
    finally:
        child.stop()
    return {"start_s": round(seconds, 3), "start_cpu_s": round(cpu_s or 0.0, 2),
            "rss_mib": round(memory["VmRSS"] / 1024, 1),
            "peak_rss_mib": round(memory["VmHWM"] / 1024, 1)}


def journal_shape(data_dir: Path) -> dict:
    journal = Journal(data_dir / REPLICATION_DIR)
    try:
        return {"start": journal.start, "end": journal.end,
                "file_bytes": (data_dir / REPLICATION_DIR / "journal.log").stat().st_size}
    finally:
        journal.close()


def median(trials: list[dict], key: str) -> float:
    return statistics.median(trial[key] for trial in trials)


def bench(entries: int, repeats: int, journal_entries_max: int) -> dict:
    """Start times and memory of a broker replaying a journal of `entries` entries, unbounded
    and then compacted below `journal_entries_max`, `repeats` trials each, as one dict; the
    data directory is gone when it returns."""
    bench_child.READY_TIMEOUT_S = START_TIMEOUT_S
    root = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    try:
        data_dir = root / "data"
        began = time.perf_counter()
        build(data_dir, entries)
        built_s = time.perf_counter() - began
        log_path = root / "broker.log"
        unbounded = ["--journal-entries-max", str(10 * entries),
                     "--journal-bytes-max", str(1 << 40)]
        shape_before = journal_shape(data_dir)
        before = [trial(data_dir, log_path, unbounded) for _ in range(repeats)]
        bounded = ["--journal-entries-max", str(journal_entries_max)]
        child, _ = start(data_dir, log_path, bounded)
        try:
            deadline = time.monotonic() + COMPACTION_TIMEOUT_S
            while not COMPACTED.search(log_path.read_text(errors="replace")):
                if time.monotonic() > deadline:
                    raise RuntimeError("the broker did not compact its journal")
                time.sleep(0.2)
        finally:
            child.stop()
        shape_after = journal_shape(data_dir)
        after = [trial(data_dir, log_path, bounded) for _ in range(repeats)]
        return {
            "entries": entries, "build_s": round(built_s, 1),
            "journal_before": shape_before, "journal_after": shape_after,
            "before": {"start_s": median(before, "start_s"),
                       "start_cpu_s": median(before, "start_cpu_s"),
                       "rss_mib": median(before, "rss_mib"),
                       "peak_rss_mib": median(before, "peak_rss_mib"), "trials": before},
            "after": {"start_s": median(after, "start_s"),
                      "start_cpu_s": median(after, "start_cpu_s"),
                      "rss_mib": median(after, "rss_mib"),
                      "peak_rss_mib": median(after, "peak_rss_mib"), "trials": after},
            "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()}
    finally:
        shutil.rmtree(root, ignore_errors=True)

