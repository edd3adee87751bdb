"""What Spark's streaming checkpoint says was committed: read, never written, by the service.

A Structured Streaming checkpoint directory holds `offsets/<B>` (written before micro-batch B
runs: a version line `v1`, one line of batch metadata JSON, then one line per source with its
end offsets; our one source's are `{"<topic>": {"<partition>": offset}}`) and `commits/<B>`
(written once B's sink returned). These are Spark's documented recovery files (the offset and
commit logs, `OffsetSeqLog` / `CommitLog`, format `v1`); the service reads them at start to
rebuild its fold state as of the last committed batch and to know how far that batch read,
and to release a partition's prefix only below what a committed batch read.

Pure file reads; thread-safe.
"""

from __future__ import annotations

import json
from pathlib import Path

OFFSETS, COMMITS = "offsets", "commits"
LOG_VERSION = "v1"


class CheckpointLogError(Exception):
    """An offsets file of the streaming checkpoint that does not read as Spark's v1 format."""


def last_committed_batch(checkpoint: Path) -> int:
    """The newest micro-batch with a commit file, -1 when none."""
    return _newest(Path(checkpoint) / COMMITS)


def is_committed(checkpoint: Path, batch_id: int) -> bool:
    return (Path(checkpoint) / COMMITS / str(batch_id)).exists()


def batch_end_offsets(checkpoint: Path, batch_id: int) -> dict[str, dict[int, int]]:
    """The end offsets micro-batch `batch_id` read to ({} for -1: nothing read yet)."""
    if batch_id < 0:
        return {}
    path = Path(checkpoint) / OFFSETS / str(batch_id)
    lines = path.read_text().splitlines()
    if len(lines) < 3 or lines[0] != LOG_VERSION:
        raise CheckpointLogError(f"{path}: not a {LOG_VERSION} offsets file")
    try:
        document = json.loads(lines[2])
    except json.JSONDecodeError as error:
        raise CheckpointLogError(f"{path}: source offsets are not JSON: {error}") from error
    return parse_source_offsets(document)


def parse_source_offsets(document) -> dict[str, dict[int, int]]:
    """{"<topic>": {"<partition>": offset}} -> {topic: {partition: offset}}."""
    if not isinstance(document, dict):
        raise CheckpointLogError(f"source offsets must be an object: {document!r}")
    return {topic: {int(partition): int(offset) for partition, offset in offsets.items()}
            for topic, offsets in document.items() if isinstance(offsets, dict)}


def _newest(directory: Path) -> int:
    if not directory.is_dir():
        return -1
    batches = [int(path.name) for path in directory.iterdir() if path.name.isdigit()]
    return max(batches, default=-1)
