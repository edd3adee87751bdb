"""Which sessions were acknowledged after the job cursor: read once, at the service's start.

A service killed after a client acknowledged its results (ResultsAcked on `sessions`) but
before its job cursor passed that session's SessionEnded restarts below the SessionEnded. Read
in order, the SessionEnded would start the whole job again (Spark over every row of the
session) before the ResultsAcked that follows it says nobody will read the results: correct,
since the rewritten results are deduplicated, but wasted, and the topics go only after it.

So the service reads `sessions` from its job cursor to the end as it stands at start, once,
and remembers every client's last ResultsAcked offset there (`AcksAhead`). A SessionEnded
below its client's ack starts no job: the client holds every result file on disk
(ResultsAcked's contract). One at or above it (a later session under the same client id) runs
as usual. Records written after the start are read in order as before: the SessionEnded of a
session acknowledged later was picked up long before its ack.

The scan is an optimisation: when it cannot read the range (retention deleted it, the broker
is away past the reader's deadline) it logs why and the service redoes jobs as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.flights.session_records import (
    SESSIONS_TOPIC,
    MalformedSessionRecordError,
    ResultsAcked,
    decode,
)
from common.kaska.errors import KaskaError
from common.kaska.range_reader import RangeReader

log = logging.getLogger("spark.service")


@dataclass
class AcksAhead:
    """Per partition of `sessions`: client id -> offset of its last ResultsAcked seen."""

    acked_at: dict[int, dict[str, int]] = field(default_factory=dict)

    def add(self, partition: int, offset: int, client_id: str) -> None:
        self.acked_at.setdefault(partition, {})[client_id] = offset

    def acknowledged_later(self, partition: int, offset: int, client_id: str) -> bool:
        """Whether a SessionEnded at `offset` was followed by its client's ResultsAcked."""
        acked = self.acked_at.get(partition, {}).get(client_id)
        return acked is not None and acked > offset


def acks_in(records: Iterable[tuple[int, bytes]]) -> dict[str, int]:
    """Client id -> offset of its last ResultsAcked among `(offset, value)` records; anything
    else (other kinds, malformed records) is skipped here and judged by the main loop."""
    acked: dict[str, int] = {}
    for offset, value in records:
        try:
            record = decode(value)
        except (MalformedSessionRecordError, RecursionError):
            continue
        if isinstance(record, ResultsAcked):
            acked[record.client_id] = offset
    return acked


def read_acks_ahead(reader: RangeReader, ranges: dict[int, tuple[int, int]]) -> AcksAhead:
    """The acks in `ranges` (partition -> [start, end) of `sessions`); a partition whose range
    cannot be read contributes none (logged)."""
    ahead = AcksAhead()
    for partition, (start, end) in sorted(ranges.items()):
        try:
            records = ((r.offset, r.value)
                       for r in reader.read(SESSIONS_TOPIC, partition, start, end))
            for client_id, offset in acks_in(records).items():
                ahead.add(partition, offset, client_id)
        except KaskaError as error:
            log.warning("%s/%d: could not read [%d, %d) for acknowledgements ahead (%s: %s); "
                        "sessions acknowledged there may be redone", SESSIONS_TOPIC, partition,
                        start, end, type(error).__name__, error)
            continue
        found = len(ahead.acked_at.get(partition, {}))
        if found:
            log.info("%s/%d: %d session(s) acknowledged in [%d, %d): their SessionEnded "
                     "starts no job", SESSIONS_TOPIC, partition, found, start, end)
    return ahead
