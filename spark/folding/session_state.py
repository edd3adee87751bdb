"""One session's folded state: what every micro-batch so far contributed, in memory and on disk.

In memory (`SessionState`): the running counts, Q3's candidates (top 2 per route so far), the
rows and slices already written to `results.<cid>` for Q1 and Q2, and Q4's fare -> count map
as a list of Arrow parts (one per micro-batch, merged into one now and then).

On disk, in the session's folds directory (spark/folding/session_files.py):
- `<B>.arrow`: written by micro-batch B for each session it touched: an Arrow IPC stream of
  B's Q4 part (batch_fold.Q4_SCHEMA) whose schema metadata holds the summary *after* B
  (`SUMMARY_KEY`: counts, written rows and slices, Q3's candidates, `last_batch` = B);
- `base-<B>.arrow`: the same, but its table is the whole Q4 map up to B: a compaction of the
  base and fold files up to B, written only for batches Spark has committed (micro-batch B + 1
  compacts up to B: Spark runs B + 1 only once B is committed), the files it replaces deleted
  afterwards.
Recovery (`load`): the newest base at or below Spark's last committed batch, then every fold
file above it up to that batch; files above it are a micro-batch that did not commit, which
Spark runs again with the same offsets and so writes again the same.

Invariants: a file is written whole or not at all; the state holds exactly the batches up to
`summary.last_batch`, each once (`add` refuses a batch at or below it); the Q4 parts add up to
the valid rows (checked on load).

Thread-safety: none; the stream's foreachBatch thread and a finishing worker share a state only
under the owner's lock (spark/folding/fold_store.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.ipc as ipc

from spark.folding.batch_fold import (
    COUNT,
    Q3_CANDIDATE_SCHEMA,
    Q4_SCHEMA,
    BatchFold,
    q4_part,
    shortest_per_route,
)
from spark.folding.session_files import SessionFiles, write_atomically
from spark.rules.contract import INVALID_KINDS

SUMMARY_KEY = b"flights.fold.summary"
BASE_PREFIX = "base-"
STREAMED_QUERIES = ("q1", "q2")  # written to results.<cid> as micro-batches find them
# Merge the Q4 parts once they hold twice the rows of the merged map (and at least this many):
# each row is merged O(log n) times, and memory stays within about three times the map. (A
# micro-batch of 270k generated rows has ~246k distinct (route, fare): merging at 1x the map
# regrouped ~1M rows every other batch.)
COMPACT_ROWS_MIN = 1_000_000
COMPACT_GROWTH = 2


class CorruptFoldError(Exception):
    """A fold file that does not read back as one (or disagrees with its session)."""


@dataclass
class Summary:
    rows: int = 0
    valid_rows: int = 0
    invalid: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INVALID_KINDS, 0))
    q2_skipped: int = 0
    # query -> [rows written, slices written] to results.<cid>
    written: dict[str, list[int]] = field(
        default_factory=lambda: {query: [0, 0] for query in STREAMED_QUERIES})
    q3: list[list] = field(default_factory=list)  # Q3_CANDIDATE_SCHEMA rows
    last_batch: int = -1

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Summary:
        return cls(**json.loads(data))


class SessionState:
    def __init__(self, files: SessionFiles, key: int) -> None:
        self.files = files
        self.key = key
        self.summary = Summary()
        self.q4_base = Q4_SCHEMA.empty_table()
        self.q4_parts: list[pa.Table] = []
        self._base_batch = -1  # the batch the base on disk covers up to

    @property
    def client_id(self) -> str:
        return self.files.client_id

    def q3_candidates(self) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(Q3_CANDIDATE_SCHEMA.names, row, strict=True))
                                     for row in self.summary.q3], schema=Q3_CANDIDATE_SCHEMA)

    def add(self, batch_id: int, fold: BatchFold, written: dict[str, tuple[int, int]]) -> None:
        """Take micro-batch `batch_id`'s fold (after its Q1/Q2 rows were written: `written`
        holds each streamed query's new [rows, slices] totals) and save it."""
        assert batch_id > self.summary.last_batch, (batch_id, self.summary.last_batch)
        summary = self.summary
        summary.rows += fold.rows
        summary.valid_rows += fold.valid_rows
        summary.q2_skipped += fold.q2_skipped
        for kind, count in fold.invalid.items():
            summary.invalid[kind] += count
        for query, totals in written.items():
            summary.written[query] = list(totals)
        merged = shortest_per_route(pa.concat_tables([self.q3_candidates(), fold.q3]))
        summary.q3 = [list(row.values()) for row in merged.to_pylist()]
        summary.last_batch = batch_id
        self.q4_parts.append(fold.q4)
        _write_fold(self.files.fold(batch_id), fold.q4, summary)

    def compact(self, committed_batch: int) -> bool:
        """Merge the Q4 parts into one base when they outgrew it (module doc); only batches up
        to `committed_batch` may be merged on disk. Whether it merged."""
        parts_rows = sum(part.num_rows for part in self.q4_parts)
        if parts_rows < max(COMPACT_ROWS_MIN, COMPACT_GROWTH * self.q4_base.num_rows):
            return False
        if self.summary.last_batch > committed_batch:
            return False  # the newest part is not committed yet: wait for the next batch
        self.q4_base = self.q4_map()
        self.q4_parts = []
        base_path = self.files.folds / f"{BASE_PREFIX}{self.summary.last_batch:012d}.arrow"
        _write_fold(base_path, self.q4_base, self.summary)
        for batch in self.files.fold_batches():
            if batch <= self.summary.last_batch:
                self.files.fold(batch).unlink(missing_ok=True)
        for path in self.files.folds.glob(f"{BASE_PREFIX}*.arrow"):
            if path != base_path:
                path.unlink(missing_ok=True)
        self._base_batch = self.summary.last_batch
        return True

    def q4_map(self) -> pa.Table:
        """The session's whole fare -> count map per route (Q4_SCHEMA), one row per pair."""
        tables = [self.q4_base, *self.q4_parts]
        return q4_part(pa.concat_tables(tables)) if len(tables) > 1 else self.q4_base

    def q4_rows(self) -> pa.Table:
        """The same map's rows unmerged (a pair may repeat): what the finish needs, which
        groups by fare and by route anyway."""
        return pa.concat_tables([self.q4_base, *self.q4_parts])

    def load(self, committed_batch: int) -> None:
        """The state as of Spark's `committed_batch` (module doc: recovery); newer files are
        removed (their batch runs again)."""
        folds = self.files.folds
        bases = sorted((int(p.name[len(BASE_PREFIX):-len(".arrow")]), p)
                       for p in folds.glob(f"{BASE_PREFIX}*.arrow")) if folds.is_dir() else []
        usable = [(batch, path) for batch, path in bases if batch <= committed_batch]
        for batch, path in bases:
            if batch > committed_batch:
                path.unlink(missing_ok=True)
        if usable:
            self._base_batch, base_path = usable[-1]
            self.q4_base, self.summary = _read_fold(base_path)
        for batch in self.files.fold_batches():
            if batch > committed_batch:
                self.files.fold(batch).unlink(missing_ok=True)
            elif batch > self._base_batch:
                part, self.summary = _read_fold(self.files.fold(batch))
                self.q4_parts.append(part)
        counted = sum(t[COUNT].to_numpy().sum() for t in [self.q4_base, *self.q4_parts]
                      if t.num_rows)
        if counted != self.summary.valid_rows:
            raise CorruptFoldError(f"session {self.client_id}: the Q4 parts hold {counted} rows, "
                                   f"the summary {self.summary.valid_rows} valid rows")


def _write_fold(path, table: pa.Table, summary: Summary) -> None:
    table = table.replace_schema_metadata({SUMMARY_KEY: summary.to_json()})
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    write_atomically(path, sink.getvalue().to_pybytes())


def _read_fold(path) -> tuple[pa.Table, Summary]:
    try:
        with ipc.open_stream(pa.memory_map(str(path))) as reader:
            table = reader.read_all()
        metadata = table.schema.metadata or {}
        summary = Summary.from_json(metadata[SUMMARY_KEY])
    except (pa.ArrowInvalid, KeyError, ValueError, TypeError) as error:
        raise CorruptFoldError(f"{path}: {error}") from error
    return table.replace_schema_metadata(None).cast(Q4_SCHEMA), summary
