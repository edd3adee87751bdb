"""QuorumStore and CommitStore: the small persisted Raft state beside the journal.

Files (under `DATA/@replication/`, CheckpointStore's atomic, checksummed, fsynced scheme: see
common/checkpoint.py):

    quorum.current / quorum.old   {"epoch": int >= 0, "voted_for": int | null}
    commit.current / commit.old   {"commit": int >= 0}
    applied.current / applied.old {"applied": int >= 0}

Both fall back like CheckpointStore: a torn or corrupt CURRENT is passed over for OLD. When
neither is valid the two stores differ on purpose:
- QuorumStore.load raises (NoValidCheckpointError, or CorruptCheckpointError for a payload that
  is not the state above): forgetting a vote could let the broker vote twice in one epoch,
  which breaks election safety, so the broker must not start until someone looks.
- CommitStore.load returns 0: the commit index is only a lower bound the broker starts from
  (the leader tells it the real one), and 0 never shows an offset above a real commit.
- AppliedStore (a CommitStore of its own name): the index below which every committed entry's
  effects (a DELETE_TOPIC's removal of its incarnation) are done, so a restart applies each
  committed entry once (a delete applied again by name would remove a newer topic of that name).
  It returns 0 when unreadable, too: applying again from 0 is safe, since a DELETE_TOPIC only
  removes the incarnation it names (topic ids).

Invariants: `QuorumStore.save` is durable when it returns (the vote is answered after it).
`CommitStore` never writes a commit index below the last one it saved or loaded.

Thread-safety: each store serialises its own saves and loads (CommitStore with its own lock
around the monotonic check; CheckpointStore below it has another). The node calls them under
its node lock.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.checkpoint import CheckpointError, CheckpointStore, CorruptCheckpointError

log = logging.getLogger(__name__)

QUORUM_NAME = "quorum"
COMMIT_NAME = "commit"
_PAYLOAD_BYTES_MAX = 4096  # the states are a few dozen bytes; anything bigger is garbage


@dataclass(frozen=True, slots=True)
class QuorumState:
    epoch: int = 0
    voted_for: int | None = None  # the candidate voted for in `epoch`; None: no vote yet


def _is_count(value: Any) -> bool:
    # bool is an int subclass; a JSON true is no epoch.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class QuorumStore:
    """The persisted (epoch, voted_for) of this broker."""

    def __init__(self, directory: Path | str):
        self._store = CheckpointStore(directory, QUORUM_NAME, _PAYLOAD_BYTES_MAX)

    def load(self) -> QuorumState:
        """The last saved state; QuorumState() when none was ever saved."""
        try:
            value = self._store.load_json()
        except ValueError as exc:  # a valid checksum around something that is not JSON
            raise CorruptCheckpointError(f"{self._store.current_path}: {exc}") from None
        if value is None:
            return QuorumState()
        epoch = value.get("epoch") if isinstance(value, dict) else None
        voted_for = value.get("voted_for") if isinstance(value, dict) else None
        if not _is_count(epoch) or not (voted_for is None or _is_count(voted_for)):
            raise CorruptCheckpointError(f"{self._store.current_path}: not a quorum state: "
                                         f"{value!r}")
        return QuorumState(epoch, voted_for)

    def save(self, state: QuorumState) -> None:
        """Durable (fsynced) when it returns."""
        if not _is_count(state.epoch) or not (state.voted_for is None
                                              or _is_count(state.voted_for)):
            raise ValueError(f"not a quorum state: {state}")
        self._store.save_json({"epoch": state.epoch, "voted_for": state.voted_for})


class CommitStore:
    """The last commit index this broker knew, persisted now and then."""

    NAME = COMMIT_NAME
    KEY = "commit"

    def __init__(self, directory: Path | str):
        self._store = CheckpointStore(directory, self.NAME, _PAYLOAD_BYTES_MAX)
        self._lock = threading.Lock()
        self._saved: int | None = None  # the highest value saved or loaded; None: not read yet

    def load(self) -> int:
        """The last saved commit index; 0 when none was saved or none is readable."""
        with self._lock:
            commit = self._read()
            self._saved = max(self._saved or 0, commit)
            return commit

    def save(self, commit: int) -> None:
        """Persist `commit`, unless it is below (or equal to) the last one saved: a commit
        index never goes back, and a stale caller must not make it."""
        if not _is_count(commit):
            raise ValueError(f"not an index for {self.KEY}: {commit!r}")
        with self._lock:
            if self._saved is None:
                self._saved = self._read()
            if commit <= self._saved:
                return
            self._store.save_json({self.KEY: commit})
            self._saved = commit

    def _read(self) -> int:
        try:
            value = self._store.load_json()
        except (CheckpointError, ValueError) as exc:
            # ValueError: valid checksum, but not JSON (written by something else).
            log.warning("%s: %s index unreadable (%s); starting from 0",
                        self._store.current_path, self.KEY, exc)
            return 0
        if value is None:
            return 0
        commit = value.get(self.KEY) if isinstance(value, dict) else None
        if not _is_count(commit):
            log.warning("%s: not a %s index: %r; starting from 0",
                        self._store.current_path, self.KEY, value)
            return 0
        return commit


class AppliedStore(CommitStore):
    """The index below which this broker applied every committed entry (see the module
    docstring); saved after each DELETE_TOPIC it applies, and with the commit index."""

    NAME = "applied"
    KEY = "applied"
