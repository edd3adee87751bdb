"""Where the streaming query service keeps each session's files, and how they are written.

Layout, under the service's state directory (`--state-dir`; in Compose a volume the driver and
every Spark worker mount at the same path):

    stream/                          Spark's checkpoint of the streaming query (offsets, commits)
    sessions/<cid>/airports.json     the session's known airports: {"key": k, "coordinates":
                                     AirportCoordinates}; its presence admits flights.<cid>
    sessions/<cid>/ended.json        SessionEnded's end offsets of flights.<cid>: the stream
                                     never reads past them
    sessions/<cid>/folds/<B>.arrow   what micro-batch B folded of this session (spark/folding/
                                     session_state.py gives the format)
    sessions/<cid>/finished          the session's results are all acknowledged by the broker

Invariants: every file is written whole or not at all (a temporary file, fsynced, renamed, the
directory fsynced), so a reader never sees half a file; `session_key` is the same in every
process (a worker derives it from the topic, the driver from the client id).

Thread-safety: plain paths and atomic file operations; safe from any thread or process.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from common.flights.session_records import flights_topic

FLIGHTS_PREFIX = flights_topic("")
STREAM_CHECKPOINT = "stream"
SESSIONS = "sessions"
AIRPORTS_FILE = "airports.json"
ENDED_FILE = "ended.json"
FINISHED_FILE = "finished"
FOLDS = "folds"
FOLD_SUFFIX = ".arrow"
SESSION_KEY_BITS = 63  # a non-negative Spark long


def session_key(client_id: str) -> int:
    """The session's number in the stream's rows: a long instead of a 36-character string per
    row (the driver detects a collision between two live sessions; spark/folding/registry)."""
    digest = hashlib.blake2b(client_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SESSION_KEY_BITS)


def client_of_topic(topic: str) -> str | None:
    """The client id of `flights.<cid>`, None for any other topic."""
    if not topic.startswith(FLIGHTS_PREFIX) or len(topic) == len(FLIGHTS_PREFIX):
        return None
    return topic[len(FLIGHTS_PREFIX):]


class SessionFiles:
    """The files of one session under `state_dir`."""

    def __init__(self, state_dir: Path, client_id: str) -> None:
        assert client_id and "/" not in client_id and client_id not in (".", ".."), client_id
        self.client_id = client_id
        self.directory = Path(state_dir) / SESSIONS / client_id

    @property
    def airports(self) -> Path:
        return self.directory / AIRPORTS_FILE

    @property
    def ended(self) -> Path:
        return self.directory / ENDED_FILE

    @property
    def finished(self) -> Path:
        return self.directory / FINISHED_FILE

    @property
    def folds(self) -> Path:
        return self.directory / FOLDS

    def fold(self, batch_id: int) -> Path:
        return self.folds / f"{batch_id:012d}{FOLD_SUFFIX}"

    def fold_batches(self) -> list[int]:
        """The micro-batch ids with a fold file, ascending."""
        if not self.folds.is_dir():
            return []
        return sorted(int(path.name[:-len(FOLD_SUFFIX)]) for path in self.folds.iterdir()
                      if path.name.endswith(FOLD_SUFFIX) and path.name[:-len(FOLD_SUFFIX)]
                      .isdigit())

    def read_json(self, path: Path):
        """The JSON of `path`, None when it does not exist."""
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None

    def write_json(self, path: Path, value) -> None:
        write_atomically(path, json.dumps(value, separators=(",", ":")).encode())

    def remove(self) -> None:
        """Every file of the session (its topics are gone)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def session_dirs(state_dir: Path) -> list[str]:
    """The client ids with a session directory."""
    root = Path(state_dir) / SESSIONS
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir() if path.is_dir())


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all, durable once this returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
