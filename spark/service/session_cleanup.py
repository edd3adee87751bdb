"""When a finished session's topics may be deleted: the query service's side of bounded disk.

A client that holds every result file on disk appends `ResultsAcked{cid}` to `sessions`
(common/flights/session_records.py). The service then deletes `airports.<cid>`, `flights.<cid>` and
`results.<cid>` once all of these hold:

- the retention has passed: `retention_s` after the ack was written (the producer's timestamp
  of the record, clamped to [0, retention_s] from the moment it is read, so a skewed client
  clock can neither delete early nor postpone forever; a restarted service counts again from
  the record's time);
- no job for the client runs (the service's running clients);
- every SessionEnded of the client this service read is *committed*: the service's committed
  position on that partition lies beyond it. Finished is not enough: a service killed between
  deleting and committing would redo the session from the SessionEnded and find its input
  gone. Once committed, no restart ever reads that SessionEnded again. A SessionEnded this run
  never read lies below where reading started, and so below the committed position.

A deletion that fails (broker away) is tried again after a pause that doubles up to
`RETRY_PAUSE_S_MAX`. Deleting a topic that is already gone counts as done, so a repeated ack,
or an ack read again after a crash, is harmless.

Crash safety (the service's part, spark/service/query_service.py): an ack's place on `sessions`
stays pending in a second cursor (consumer group `query-service-cleanup`) until its topics are
deleted; a restart reads `sessions` from the lower of the two committed positions, so an ack whose
deletion was not done yet is read, and scheduled, again. The job cursor never waits for
deletions, so a long retention holds back nothing but the cleanup cursor.

Pure state, no I/O and no clock of its own (times are arguments, in seconds of one monotonic
clock); not thread-safe: the service's main loop owns it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from common.backoff import Backoff

RETRY_PAUSE_S_INITIAL = 1.0
RETRY_PAUSE_S_MAX = 30.0
RETRY_BACKOFF = Backoff(initial_s=RETRY_PAUSE_S_INITIAL, max_s=RETRY_PAUSE_S_MAX)
WAITING_MAX_DEFAULT = 10_000  # acked sessions waiting for their deletion (the loop then pauses)


@dataclass
class _Acked:
    due_s: float
    places: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) of acks
    failures: int = 0


def retention_due_s(now_s: float, retention_s: float, age_s: float) -> float:
    """When an ack that is `age_s` old (by its writer's clock) comes due."""
    assert retention_s >= 0
    return now_s + min(retention_s, max(0.0, retention_s - age_s))


class SessionCleanup:
    """The acked sessions waiting for their topics' deletion (rules: module doc)."""

    def __init__(self, retention_s: float, waiting_max: int = WAITING_MAX_DEFAULT) -> None:
        assert retention_s >= 0 and waiting_max >= 1
        self.retention_s = retention_s
        self.waiting_max = waiting_max
        self._acked: dict[str, _Acked] = {}
        # client id -> partition -> offset of the last SessionEnded read: what must be
        # committed before the client's topics may go.
        self._ended: dict[str, dict[int, int]] = {}

    def ended(self, client_id: str, partition: int, offset: int) -> None:
        """A SessionEnded of `client_id` was read at this place."""
        places = self._ended.setdefault(client_id, {})
        places[partition] = max(offset, places.get(partition, -1))

    def acked(self, client_id: str, partition: int, offset: int, now_s: float,
              age_s: float) -> None:
        """A ResultsAcked of `client_id`, written `age_s` ago, was read at this place; the
        place stays pending until `deleted` returns it."""
        entry = self._acked.get(client_id)
        if entry is None:
            entry = self._acked[client_id] = _Acked(
                retention_due_s(now_s, self.retention_s, age_s))
        entry.places.append((partition, offset))

    def waiting(self) -> int:
        return len(self._acked)

    def full(self) -> bool:
        return len(self._acked) >= self.waiting_max

    def due(self, now_s: float, running: Collection[str],
            committed: Mapping[int, int]) -> list[str]:
        """The clients whose topics may be deleted now, in ack order. `running`: clients with
        a job under way; `committed`: the job cursor's committed position per partition."""
        self._forget_committed(committed)
        return [cid for cid, entry in self._acked.items()
                if entry.due_s <= now_s and cid not in running and cid not in self._ended]

    def _forget_committed(self, committed: Mapping[int, int]) -> None:
        for cid in list(self._ended):
            places = self._ended[cid]
            for partition, offset in list(places.items()):
                if committed.get(partition, -1) > offset:
                    del places[partition]
            if not places:
                del self._ended[cid]

    def deleted(self, client_id: str) -> list[tuple[int, int]]:
        """The client's topics are gone: the ack places that are now finished."""
        return self._acked.pop(client_id).places

    def failed(self, client_id: str, now_s: float) -> float:
        """Deleting the client's topics failed: try again later; the pause in seconds."""
        entry = self._acked[client_id]
        pause_s = RETRY_BACKOFF.delay_s(entry.failures)
        entry.failures += 1
        entry.due_s = now_s + pause_s
        return pause_s
