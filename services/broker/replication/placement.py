"""Placement: which replication group replicates a partition, which broker should lead each
group, and where a group keeps its state (docs/replication.md, "Leadership spread over the
brokers").

A broker runs `groups` Raft groups (`--replication-groups`, by default one per broker), each
with its own journal, votes, leader and Log. Group 0 is also the metadata group: topics are
created and deleted there, and it replicates the broker's internal topics (`__offsets`).
Partition p of topic t belongs to group `(crc32c(t) + p) mod groups`: consecutive partitions
fall in consecutive groups, so a topic of `groups` partitions or more has a partition in every
group, and its load spreads over every group's leader. Group g's preferred leader is the
(g mod N)-th broker by node id, so with one group per broker each broker leads one group.

On disk, group 0 is the data directory itself (its Log and `@replication/`, as before
groups existed); group g > 0 is `DATA/@group-<g>/` with its own Log and `@replication/`.
`DATA/@groups.json` records the group count the directory was written with: placement is a
function of it, so a broker refuses to start with another count (`GroupCountMismatchError`)
rather than look for partitions in the wrong groups. A directory without it that already holds
replication state was written with one group.

Pure functions, except `check_group_count`, which reads and writes the marker (at start,
before any group opens its directory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import crc32c

from common.kaska.topic_name import is_internal
from services.broker.storage.partition import fsync_directory

METADATA_GROUP = 0
GROUPS_MAX = 64
GROUP_DIR_PREFIX = "@group-"
GROUPS_FILE = "@groups.json"
GROUPS_FORMAT = 1
REPLICATION_STATE_DIR = "@replication"  # as replication/config.py's REPLICATION_DIR


class GroupCountMismatchError(ValueError):
    """The data directory was written with another replication group count."""

    def __init__(self, path: Path, written: int, configured: int) -> None:
        super().__init__(
            f"{path}: this data directory was written with {written} replication group(s); "
            f"the broker is configured with {configured}. Partitions are placed by the group "
            f"count, so it cannot change under existing data: start with "
            f"--replication-groups {written}, or empty the directory (`make "
            "docker-compose-clean` deletes the Compose deployment's volumes) to start afresh")
        self.path = path
        self.written = written
        self.configured = configured


class InvalidGroupCountError(ValueError):
    """A replication group count outside 1..GROUPS_MAX."""


def check_groups(groups: int) -> int:
    if not 1 <= groups <= GROUPS_MAX:
        raise InvalidGroupCountError(f"{groups} replication groups; 1..{GROUPS_MAX} allowed")
    return groups


def group_of(topic: str, partition: int, groups: int) -> int:
    """The group replicating `topic`/`partition`."""
    if groups == 1 or is_internal(topic):
        return METADATA_GROUP
    return (crc32c.crc32c(topic.encode("utf-8")) + partition) % groups


def partitions_of(topic: str, partitions: int, group: int, groups: int) -> list[int]:
    """The partitions of a topic of `partitions` partitions that `group` replicates."""
    return [p for p in range(partitions) if group_of(topic, p, groups) == group]


def preferred_leader(group: int, voters: Iterable[int]) -> int:
    """The broker that should lead `group`: spread evenly, the same on every broker."""
    ordered = sorted(voters)
    return ordered[group % len(ordered)]


def group_directory(data_dir: Path, group: int) -> Path:
    """Where `group` keeps its Log and replication state."""
    return data_dir if group == METADATA_GROUP else data_dir / f"{GROUP_DIR_PREFIX}{group}"


def check_group_count(data_dir: Path, groups: int) -> None:
    """Refuse a data directory written with another group count; record the count in a new
    one (fsynced, before any group writes)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / GROUPS_FILE
    written = _read_groups(path)
    if written is None:
        written = 1 if _holds_state(data_dir) else groups
    if written != groups:
        raise GroupCountMismatchError(path, written, groups)
    if not path.exists():
        temporary = path.with_name(path.name + ".tmp")
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(json.dumps({"format": GROUPS_FORMAT, "groups": groups}))
            out.flush()
            os.fsync(out.fileno())
        os.rename(temporary, path)
        fsync_directory(data_dir)


def _read_groups(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        meta = json.loads(text)
    except ValueError:
        meta = None
    groups = meta.get("groups") if isinstance(meta, dict) else None
    if (not isinstance(meta, dict) or meta.get("format") != GROUPS_FORMAT
            or not isinstance(groups, int) or not 1 <= groups <= GROUPS_MAX):
        raise CorruptGroupsFileError(f"{path}: not a replication group count ({text[:200]!r}); "
                                     "restore it or empty the data directory")
    return groups


class CorruptGroupsFileError(ValueError):
    """`@groups.json` exists but does not hold a group count."""


def _holds_state(data_dir: Path) -> bool:
    """Whether the directory already holds a broker's data (then it predates groups)."""
    replication = data_dir / REPLICATION_STATE_DIR
    if replication.is_dir() and any(replication.iterdir()):
        return True
    return any(not entry.name.startswith("@") for entry in data_dir.iterdir())
