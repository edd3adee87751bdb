"""Control records of a client session, as JSON documents on Kaska topics.

`sessions` topic (1 partition), written by clients, followed by the query service:
    SessionStarted{client_id, partitions}
    SessionEnded{client_id, end_offsets: {topic: [end offset per partition]}, rows_sent: {file: n},
                 rows_rejected: {kind: n}}
`results.<client_id>` topic (1 partition), written by the query service, read by the client:
    ResultRows{query, first_row, rows: [[field, ...], ...]}   a slice of one query's CSV rows
    QueryDone{query, rows, invalid: {kind: n}}                  the query's last record

End offsets make completeness exact: the service reads exactly [0, end) of every partition of
the session's topics, whatever else may be appended later, and nobody counts EOF markers.
Result rows are numbered per query (`first_row`), so a reader can drop a repeated slice.

Pure functions; thread-safe.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

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


@dataclass(frozen=True)
class SessionStarted:
    client_id: str
    partitions: int


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


ControlRecord = SessionStarted | SessionEnded | ResultRows | QueryDone
_TYPES: dict[str, type] = {cls.__name__: cls for cls in (SessionStarted, SessionEnded,
                                                          ResultRows, QueryDone)}


def encode(record: ControlRecord) -> bytes:
    return json.dumps({"type": type(record).__name__, **asdict(record)},
                      separators=(",", ":")).encode()


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
    return record
