"""Replication errors that never travel on the wire as themselves.

They subclass KaskaError (wire code: unknown server error) so a request thread answers them
like any broker fault and the replication loop, which survives KaskaError, keeps running.
A deposed leader's append is refused with `common.kaska.errors.NotLeaderError` instead, since
that one the client must see (and retry against the new leader).
"""

from __future__ import annotations

from common.kaska.errors import KaskaError, KaskaStorageError, NotLeaderError


class ReplicationError(KaskaError):
    """Base of the broker's replication errors."""


class CorruptJournalError(ReplicationError):
    """A journal file that is damaged beyond a torn tail: its header is not a Kaska journal's
    (no `KJNL` magic, unknown format version, shorter than the header), or a record before the
    last one is bad (CRC, length, fields), or a whole record does not follow the one before it
    (index, epoch). Never repaired automatically: cutting the journal there would drop
    committed entries and make `reconcile` delete the topics they created, so the broker
    refuses to start instead."""


class InvalidJournalEntryError(ReplicationError):
    """An entry that cannot be stored: a field out of its on-disk range, a topic name longer
    than the bound, an unknown kind."""


class JournalGapError(ReplicationError):
    """A follower's entry whose index is not the journal's end (the indexes must stay dense)."""


class JournalEpochError(ReplicationError):
    """An entry whose epoch is below the journal's last epoch (epochs never go back)."""


class JournalClosedError(ReplicationError, NotLeaderError):
    """The journal was closed (the broker is stopping). On the wire it is NOT_LEADER
    (retriable): a produce racing the shutdown is discarded, and its client retries on the
    next leader instead of giving up."""


class SyncFailedError(ReplicationError, KaskaStorageError):
    """An fsync of replication's fsync policy `entry` failed (EIO, ...): the entries it was to
    cover are not counted as held, and a produce waiting on it is answered KAFKA_STORAGE_ERROR
    (retriable). Linux may mark the failed pages clean, so a later fsync can succeed without
    them: an operator should treat this broker's disk as suspect (it is logged as an error)."""


class JournalCompactedError(ReplicationError):
    """A journal operation below the journal's snapshot (a truncation or a compaction point
    under `start`): the entries there were compacted away. Raft never asks for it (the snapshot
    covers committed entries only); refusing keeps the committed prefix if a rule broke.
    `start`: the journal's first index; `requested`: the index asked for."""

    start: int = 0
    requested: int = 0

    def __init__(self, message: str, start: int, requested: int) -> None:
        super().__init__(message)
        self.start, self.requested = start, requested
