"""Control records of a client session, as JSON documents on Kaska topics.

`sessions` topic (1 partition), written by clients, followed by the query service:
    SessionStarted{client_id, partitions, airports_end_offsets: [end offset per partition]}
                               written once the airports file is acknowledged, before any
                               flights row: [0, end) of every airports partition is the whole
                               airports file (None in records written before it existed)
    SessionEnded{client_id, end_offsets: {topic: [end offset per partition]}, rows_sent: {file: n},
                 rows_rejected: {kind: n}}
    ResultsAcked{client_id, rows_per_query: {query: n}}
                               the client saved every result file durably: the session's
                               topics (`session_topics`) may go (spark/service/session_cleanup.py)
`results.<client_id>` topic (1 partition), written by the query service, read by the client:
    ResultRows{query, first_row, rows: [[field, ...], ...]}   a slice of one query's CSV rows
    QueryDone{query, rows, invalid: {kind: n}}                  the query's last record

End offsets make completeness exact: the service reads exactly [0, end) of every partition of
the session's topics, whatever else may be appended later, and nobody counts EOF markers.
Result rows are numbered per query (`first_row`), so a reader can drop a repeated slice.

A reader meets records of types it does not know (an older service, a newer client): `decode`
raises MalformedSessionRecordError for them and the reader skips them. Older logs simply lack
ResultsAcked, or its `rows_per_query`, or SessionStarted's `airports_end_offsets`, and still
decode.

Pure functions; thread-safe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

SESSIONS_TOPIC = "sessions"
QUERIES = ("q1", "q2", "q3", "q4")
record_bytes_max = 16 * 1024 * 1024


class MalformedSessionRecordError(ValueError):
    """A control record that is not valid JSON of a known type with the expected fields."""


def flights_topic(client_id: str) -> str:
    return f"flights.{client_id}"


def airports_topic(client_id: str) -> str:
    return f"airports.{client_id}"


def results_topic(client_id: str) -> str:
    return f"results.{client_id}"


def session_topics(client_id: str) -> tuple[str, str, str]:
    """Every topic of one session, the input ones first: what its deletion removes."""
    return airports_topic(client_id), flights_topic(client_id), results_topic(client_id)


@dataclass(frozen=True)
class SessionStarted:
    client_id: str
    partitions: int
    # The log end of every airports partition, one per partition: the airports are complete.
    airports_end_offsets: list[int] | None = None


@dataclass(frozen=True)
class SessionEnded:
    client_id: str
    end_offsets: dict[str, list[int]]
    rows_sent: dict[str, int] = field(default_factory=dict)
    rows_rejected: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ResultRows:
    query: str
    first_row: int
    rows: list[list[str]]


@dataclass(frozen=True)
class QueryDone:
    query: str
    rows: int
    invalid: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ResultsAcked:
    """The client holds every result file on disk (written and fsynced, its checkpoint says
    so): it will never read the session's topics again.

    `rows_per_query` says how many rows of each query it saved, for readers that may never see
    the results topic: the status page polls once a second, and a small session's topics can
    be written, read and deleted within one poll. Empty in acks written before it existed."""

    client_id: str
    rows_per_query: dict[str, int] = field(default_factory=dict)


ControlRecord = SessionStarted | SessionEnded | ResultsAcked | ResultRows | QueryDone
_TYPES: dict[str, type] = {cls.__name__: cls for cls in (SessionStarted, SessionEnded,
                                                          ResultsAcked, ResultRows, QueryDone)}


def encode(record: ControlRecord) -> bytes:
    # The fields as they are, not `dataclasses.asdict`: that deep-copies a ResultRows' every
    # row and value first (0.38 s of the driver's time for Q2's 114k rows at 2M input rows).
    document = {"type": type(record).__name__}
    document.update((f.name, getattr(record, f.name)) for f in fields(record))
    return json.dumps(document, separators=(",", ":")).encode()


def decode(payload: bytes | memoryview) -> ControlRecord:
    if len(payload) > record_bytes_max:
        raise MalformedSessionRecordError(f"control record over {record_bytes_max} bytes")
    try:
        doc = json.loads(bytes(payload))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MalformedSessionRecordError(f"not JSON: {err}") from err
    if not isinstance(doc, dict) or doc.get("type") not in _TYPES:
        raise MalformedSessionRecordError("no known record type")
    cls = _TYPES[doc.pop("type")]
    try:
        record = cls(**doc)
    except TypeError as err:
        raise MalformedSessionRecordError(f"bad fields for {cls.__name__}: {err}") from err
    if isinstance(record, ResultRows | QueryDone) and record.query not in QUERIES:
        raise MalformedSessionRecordError(f"unknown query {record.query!r}")
    if isinstance(record, ResultsAcked):
        _check_acked(record)
    if isinstance(record, SessionStarted):
        _check_started(record)
    return record


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_started(record: SessionStarted) -> None:
    if not (isinstance(record.partitions, int) and not isinstance(record.partitions, bool)
            and record.partitions >= 1):
        raise MalformedSessionRecordError(f"bad partitions {record.partitions!r}")
    ends = record.airports_end_offsets
    if ends is not None and not (isinstance(ends, list) and len(ends) == record.partitions
                                 and all(_is_count(end) for end in ends)):
        raise MalformedSessionRecordError(
            f"bad airports_end_offsets {str(ends)[:200]!r} for {record.partitions} partitions")


def _check_acked(record: ResultsAcked) -> None:
    if not (isinstance(record.client_id, str) and record.client_id):
        raise MalformedSessionRecordError(f"bad client_id {record.client_id!r}")
    counts = record.rows_per_query
    if not (isinstance(counts, dict) and all(
            query in QUERIES and _is_count(rows) for query, rows in counts.items())):
        raise MalformedSessionRecordError(f"bad rows_per_query {str(counts)[:200]!r}")
