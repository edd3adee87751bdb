"""The two hooks the streaming query gives the `kaska` source: which session topics it may read
(the gate) and what a worker makes of each Arrow batch of flight rows (the transform).

- `admit(topic, state_dir)` (the source's `topicGate`, on the driver's side of the source):
  `flights.<cid>` is read only once the driver registered the session's airports
  (`sessions/<cid>/airports.json`, written when SessionStarted is read), never past the end
  offsets of its SessionEnded once those are known (`ended.json`), and no more once the
  session is finished. Every other topic is never read.
- `derive_for_session(table, argument)` (the source's `arrowTransform`, in the Python workers):
  spark/flight_fields.derive with the session's airports, plus the `session` key column
  (spark/folding/session_files.session_key). `argument` is the JSON {"state_dir": ...,
  "topic": "{topic}"}; the source puts each input partition's topic in place of `{topic}`.

Why a file and not the driver's memory: the workers (Spark executors, other containers in
Compose) and the source's driver-side runner are other processes; the state directory is where
all of them look (a volume in Compose). A worker reads a session's airports once per process.

Thread-safety: pure functions and a process-wide cache of immutable values.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from spark.airport_distances import AirportCoordinates
from spark.flight_fields import DERIVED_SCHEMA, derive
from spark.folding.batch_fold import SESSION
from spark.folding.session_files import SessionFiles, client_of_topic
from spark.kaska_gate import TopicAdmission

STREAM_SCHEMA = DERIVED_SCHEMA.append(pa.field(SESSION, pa.int64()))
TOPIC_PLACEHOLDER = "{topic}"
_SESSIONS_CACHED_MAX = 64


class SessionNotRegisteredError(Exception):
    """A worker met rows of a session whose airports the driver has not registered: the gate
    admits no such topic, so this is a state directory the worker does not share."""


def transform_argument(state_dir: Path) -> str:
    return json.dumps({"state_dir": str(state_dir), "topic": TOPIC_PLACEHOLDER})


def admit(topic: str, state_dir: str) -> TopicAdmission:
    client_id = client_of_topic(topic)
    if client_id is None or "/" in client_id:
        return TopicAdmission(admitted=False, end_offsets=None)
    files = SessionFiles(Path(state_dir), client_id)
    if files.finished.exists() or not files.airports.exists():
        return TopicAdmission(admitted=False, end_offsets=None)
    ended = files.read_json(files.ended)
    caps = None if ended is None else {partition: offset
                                       for partition, offset in enumerate(ended)}
    return TopicAdmission(admitted=True, end_offsets=caps)


def derive_for_session(table: pa.Table, argument: str) -> pa.Table:
    if table.num_rows == 0:
        return STREAM_SCHEMA.empty_table()
    spec = json.loads(argument)
    client_id = client_of_topic(spec["topic"])
    if client_id is None:
        raise SessionNotRegisteredError(f"{spec['topic']!r} is no session's flights topic")
    key, coordinates = _session_airports(spec["state_dir"], client_id)
    derived = derive(table, coordinates)
    keys = pa.array(np.full(derived.num_rows, key, dtype=np.int64))
    return derived.append_column(STREAM_SCHEMA.field(SESSION), keys)


@functools.lru_cache(maxsize=_SESSIONS_CACHED_MAX)
def _session_airports(state_dir: str, client_id: str) -> tuple[int, str]:
    files = SessionFiles(Path(state_dir), client_id)
    registered = files.read_json(files.airports)
    if registered is None:
        raise SessionNotRegisteredError(f"session {client_id}: no {files.airports}")
    coordinates = AirportCoordinates.from_json(json.dumps(registered["coordinates"]))
    return int(registered["key"]), coordinates.to_json()
