"""The client's resume point: how far a session got, checkpointed so a restart continues there.

Stored with the shared `CheckpointStore` (TMP -> CURRENT -> OLD, fsync, rename; see
common/checkpoint.py) as store `session-<client id>` in the state directory, payload JSON:

    {"format": 1, "client_id": "<uuid>", "partitions": P, "batch_rows": B,
     "files": {"airports": {"bytes": size, "messages_acked": n, "rows_sent": null | n,
                            "rows_rejected": null | {kind: n}}, "flights": {...}},
     "session_started": true, "session_ended": null | {SessionEnded fields},
     "results_saved": false, "results_acked": false}

`results_saved`: q1.csv ... q4.csv, report.html and summary.json are written and fsynced, so a
restart never reads the results topic again (the query service may delete it once acked);
`results_acked`: the ResultsAcked record is stored on `sessions`. Both are absent (false) in
checkpoints written before they existed.

`messages_acked` is the number of leading messages of that file the broker acknowledged: every
message id below it is stored, so a restart skips them (message ids: client/message_ids.py).
`rows_sent` and `rows_rejected` are filled in once the whole file is acknowledged.
The checkpoint may lag the broker (it is saved every `checkpoint_interval_s`, not per batch);
the messages re-sent after a restart are recognised by the broker and not stored twice.
`partitions`, `batch_rows` and each file's size must match on resume, because they decide which
rows form which message; a mismatch raises `ResumeMismatchError` rather than sending rows under
another message's id.

Thread-safety: `ResumeState` is owned by the uploading thread; `SessionCheckpoint.save` may be
called from any one thread at a time (the store serialises writers).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.checkpoint import CheckpointError, CheckpointStore
from common.flights.session_records import SessionEnded

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
FILE_NAMES = ("airports", "flights")


class ResumeError(Exception):
    """Base of the resume errors: the saved state cannot be used for this run."""


class ResumeMismatchError(ResumeError):
    """The saved session was made with other partitions, batch size, files or client id."""


class CorruptResumeStateError(ResumeError):
    """A checkpoint whose JSON lacks fields or has the wrong types."""


class SavedResultsMissingError(ResumeError):
    """The checkpoint says the results were saved, but the result files are not there."""


@dataclass
class FileProgress:
    bytes: int
    messages_acked: int = 0
    # Set once the whole file is acknowledged (so a resumed session can still report them):
    rows_sent: int | None = None
    rows_rejected: dict[str, int] | None = None


@dataclass
class ResumeState:
    client_id: str
    partitions: int
    batch_rows: int
    files: dict[str, FileProgress]
    session_started: bool = False
    session_ended: SessionEnded | None = None
    results_saved: bool = False
    results_acked: bool = False
    resumed: bool = field(default=False, compare=False)  # loaded from a checkpoint

    def to_json(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT,
            "client_id": self.client_id,
            "partitions": self.partitions,
            "batch_rows": self.batch_rows,
            "files": {name: asdict(progress) for name, progress in self.files.items()},
            "session_started": self.session_started,
            "session_ended": None if self.session_ended is None else asdict(self.session_ended),
            "results_saved": self.results_saved,
            "results_acked": self.results_acked,
        }

    @classmethod
    def from_json(cls, data: dict) -> ResumeState:
        try:
            if data["format"] != CHECKPOINT_FORMAT:
                raise CorruptResumeStateError(f"unknown checkpoint format {data['format']!r}")
            ended = data["session_ended"]
            return cls(
                client_id=str(data["client_id"]),
                partitions=int(data["partitions"]),
                batch_rows=int(data["batch_rows"]),
                files={str(name): _file_progress(p) for name, p in data["files"].items()},
                session_started=bool(data["session_started"]),
                session_ended=None if ended is None else SessionEnded(**ended),
                results_saved=_flag(data, "results_saved"),
                results_acked=_flag(data, "results_acked"),
                resumed=True,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorruptResumeStateError(f"bad client checkpoint: {error!r}") from error

    def file_done(self, name: str) -> bool:
        return self.files[name].rows_sent is not None

    def check_matches(self, fresh: ResumeState) -> None:
        """Raise ResumeMismatchError unless `fresh` (this run's settings) fits this state."""
        mine = (self.client_id, self.partitions, self.batch_rows,
                {name: p.bytes for name, p in self.files.items()})
        theirs = (fresh.client_id, fresh.partitions, fresh.batch_rows,
                  {name: p.bytes for name, p in fresh.files.items()})
        if mine != theirs:
            raise ResumeMismatchError(
                "the saved session (client id, partitions, batch rows, file sizes) "
                f"{mine} does not match this run's {theirs}")


def _flag(data: dict, name: str) -> bool:
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise CorruptResumeStateError(f"bad client checkpoint: {name} is {value!r}")
    return value


def _file_progress(fields: dict) -> FileProgress:
    rejected = fields.get("rows_rejected")
    rows_sent = fields.get("rows_sent")
    return FileProgress(
        bytes=int(fields["bytes"]),
        messages_acked=int(fields["messages_acked"]),
        rows_sent=None if rows_sent is None else int(rows_sent),
        rows_rejected=None if rejected is None else {str(k): int(v) for k, v in rejected.items()},
    )


class SessionCheckpoint:
    """Loads and saves one client's `ResumeState` (file format: module doc)."""

    def __init__(self, state_dir: Path, client_id: str) -> None:
        self.store = CheckpointStore(state_dir, name=f"session-{client_id}")

    def load_or(self, fresh: ResumeState) -> ResumeState:
        """The saved state when there is one (checked against `fresh`), else `fresh`."""
        data = self.store.load_json()
        if data is None:
            return fresh
        saved = ResumeState.from_json(data)
        saved.check_matches(fresh)
        return saved

    def save(self, state: ResumeState) -> None:
        self.store.save_json(state.to_json())

    def save_quietly(self, state: ResumeState) -> bool:
        """Save, logging instead of raising: a lost checkpoint only costs re-sent batches."""
        try:
            self.save(state)
        except (CheckpointError, OSError) as error:
            log.error("cannot checkpoint the upload progress: %s", error)
            return False
        return True
