"""Every replica's stored bytes, read from the brokers' data directories once the processes are
gone, and their comparison: after a healed, converged round each partition (of every
replication group, `@group-<g>` directories included) must hold the same log end offset and
the same bytes on every broker, from the latest log start offset among them (a replica
restored from a snapshot may start later).

Invariants: only called with every broker stopped (a Log takes its directory's lock).
Threads: the caller's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from scripts.nemesis.history import Finding
from services.broker.replication.placement import group_directory, group_of
from services.broker.storage.log import Log

READ_ALL_BYTES = 1 << 40

PartitionKey = tuple[int, str, int]  # (group, topic, partition)


def read_replica(data_dir: Path, groups: int) -> dict[PartitionKey, tuple[int, int, Path]]:
    """(group, topic, partition) -> (log start, log end, the group directory) of one broker."""
    found: dict[PartitionKey, tuple[int, int, Path]] = {}
    for group in range(groups):
        directory = group_directory(data_dir, group)
        if not directory.is_dir():
            continue
        with Log(directory, holds=lambda t, p, g=group: group_of(t, p, groups) == g) as log:
            for topic in log.topics():
                for partition in log.held(topic):
                    stored = log.partition(topic, partition)
                    found[(group, topic, partition)] = (stored.log_start_offset,
                                                        stored.log_end_offset, directory)
    return found


def digest_from(directory: Path, groups: int, group: int, topic: str, partition: int,
                offset: int) -> str:
    """A digest of the partition's bytes from `offset` to its end."""
    with Log(directory, holds=lambda t, p: group_of(t, p, groups) == group) as log:
        stored = log.partition(topic, partition)
        data = stored.read_bytes(offset, READ_ALL_BYTES) if offset < stored.log_end_offset \
            else b""
    return hashlib.blake2b(data, digest_size=16).hexdigest() + f"/{len(data)}B"


def compare_replicas(data_dirs: dict[int, Path], groups: int) -> tuple[list[Finding], int]:
    """Findings where replicas differ, and how many partitions were compared."""
    replicas = {i: read_replica(path, groups) for i, path in data_dirs.items()}
    keys = sorted(set().union(*(set(found) for found in replicas.values())))
    findings: list[Finding] = []
    for key in keys:
        group, topic, partition = key
        where = f"{topic}/{partition} (group {group})"
        missing = [i for i, found in replicas.items() if key not in found]
        if missing:
            findings.append(Finding("replica missing", f"{where}: not on broker(s) {missing}"))
            continue
        ends = {i: found[key][1] for i, found in replicas.items()}
        if len(set(ends.values())) > 1:
            findings.append(Finding("replicas differ", f"{where}: log end offsets {ends}"))
            continue
        start = max(found[key][0] for found in replicas.values())
        digests = {i: digest_from(found[key][2], groups, group, topic, partition, start)
                   for i, found in replicas.items()}
        if len(set(digests.values())) > 1:
            findings.append(Finding("replicas differ",
                                    f"{where}: bytes from offset {start} differ: {digests}"))
    return findings, len(keys)
