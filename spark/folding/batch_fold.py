"""What one micro-batch contributes to each session: its counts, Q1 and Q2 rows, Q3's candidates
and Q4's fares, from the batch's rows aggregated where they were read.

    partials (AGGREGATE_SCHEMA: derived rows grouped by every field and the session, counted;
              spark/folding/stream_fields.fold_rows, in the source's workers)
    folds = folds_by_session(pa.concat_tables(partials))   # {session key: BatchFold}

For most rows only (kind, route, fare, airports known) are set, so they collapse to one row per
distinct fare of a route; Q1 and Q2 rows keep their printed fields. The same key may come from
several partials (several ranges of a micro-batch): every step below adds counts, so that is
the same as one aggregate.

`folds_by_session` splits that table per session:
- counts: rows, valid rows, invalid rows by kind (QUERIES.md "Valid rows", every kind), and
  the valid rows Q2 skipped because an airport is unknown;
- `q4`: (route_id, fare, n) over the valid rows: the exact fare -> count map of each route
  (Q4 takes the fares above the session's final mean at the finish: spark/folding/finish.py);
- `q1`, `q2`: the rows, one per input row (a group of n equal rows is n rows), sorted by every
  column so that a micro-batch run again yields them in the same order (the result writer's
  row numbers and sequence numbers depend on it);
- `q3`: per route, the Q3_ROWS_PER_ROUTE_MAX shortest Q1 rows (QUERIES.md's order, then
  stopovers and travelDuration as spark.queries.shortest_per_route breaks the last ties): the
  top 2 of a union is the top 2 of the parts' top 2s.

Pure functions over pyarrow tables; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.result_csv import QUERY_HEADERS
from spark.flight_fields import (
    DERIVED_SCHEMA,
    DURATION_MINUTES,
    ENDPOINTS_KNOWN,
    FARE,
    INVALID_KIND,
    ROUTE_ID,
    STOPOVERS,
    TOTAL_DISTANCE,
)
from spark.queries import INVALID_KINDS, Q3_ROWS_PER_ROUTE_MAX
from spark.route_id import route_of

SESSION = "session"  # the session key column (spark/folding/session_files.session_key)
COUNT = "n"
FOLD_KEYS = (SESSION, *DERIVED_SCHEMA.names)
AGGREGATE_SCHEMA = DERIVED_SCHEMA.insert(0, pa.field(SESSION, pa.int64())).append(
    pa.field(COUNT, pa.int64()))
Q4_SCHEMA = pa.schema([(ROUTE_ID, pa.int64()), (FARE, pa.float64()), (COUNT, pa.int64())])
# Q3's order within a route (spark.queries.shortest_per_route).
Q3_ORDER = (DURATION_MINUTES, "legId", FARE, STOPOVERS, "travelDuration")
Q3_CANDIDATE_SCHEMA = pa.schema([(ROUTE_ID, pa.int64()), (DURATION_MINUTES, pa.int64()),
                                 ("legId", pa.string()), (FARE, pa.float64()),
                                 (STOPOVERS, pa.string()), ("travelDuration", pa.string())])


@dataclass(frozen=True)
class BatchFold:
    rows: int
    valid_rows: int
    invalid: dict[str, int]  # every kind of INVALID_KINDS, zeros included
    q2_skipped: int
    q4: pa.Table  # Q4_SCHEMA
    q1: pa.Table  # QUERY_HEADERS["q1"], sorted
    q2: pa.Table  # QUERY_HEADERS["q2"], sorted
    q3: pa.Table  # Q3_CANDIDATE_SCHEMA, at most Q3_ROWS_PER_ROUTE_MAX rows per route


def folds_by_session(table: pa.Table) -> dict[int, BatchFold]:
    """Each session's part of one micro-batch's aggregate (AGGREGATE_SCHEMA)."""
    if table.num_rows == 0:
        return {}
    sessions = table[SESSION]
    return {key: fold_of(table.filter(pc.equal(sessions, key)))
            for key in pc.unique(sessions).to_pylist()}


def fold_of(rows: pa.Table) -> BatchFold:
    """The fold of one session's aggregated rows."""
    counts = rows[COUNT]
    kinds = rows[INVALID_KIND]
    valid = pc.is_null(kinds)
    invalid = {kind: _sum(pc.filter(counts, pc.equal(kinds, kind))) for kind in INVALID_KINDS}
    valid_rows = rows.filter(valid)
    unknown = pc.invert(pc.fill_null(valid_rows[ENDPOINTS_KNOWN], False))
    q1_rows = expand(rows.filter(pc.is_valid(rows[STOPOVERS])))
    return BatchFold(
        rows=_sum(counts), valid_rows=_sum(valid_rows[COUNT]), invalid=invalid,
        q2_skipped=_sum(pc.filter(valid_rows[COUNT], unknown)),
        q4=q4_part(valid_rows.select([ROUTE_ID, FARE, COUNT])),
        q1=sort_all(_printed(q1_rows, "q1")),
        q2=sort_all(_printed(expand(rows.filter(pc.is_valid(rows[TOTAL_DISTANCE]))), "q2")),
        q3=shortest_per_route(q1_rows.select(Q3_CANDIDATE_SCHEMA.names).cast(Q3_CANDIDATE_SCHEMA)))


def q4_part(rows: pa.Table) -> pa.Table:
    """(route_id, fare, n) with one row per distinct (route_id, fare): the counts summed."""
    grouped = rows.group_by([ROUTE_ID, FARE], use_threads=False).aggregate([(COUNT, "sum")])
    return pa.table([grouped[ROUTE_ID], grouped[FARE], grouped[f"{COUNT}_sum"]],
                    schema=Q4_SCHEMA)


def expand(rows: pa.Table) -> pa.Table:
    """One row per counted row: a row with n = 3 three times."""
    repeats = rows[COUNT].to_numpy()
    if rows.num_rows == 0 or (repeats == 1).all():
        return rows
    return rows.take(pa.array(np.repeat(np.arange(rows.num_rows), repeats)))


def shortest_per_route(candidates: pa.Table) -> pa.Table:
    """Per route, the Q3_ROWS_PER_ROUTE_MAX first rows in Q3_ORDER."""
    if candidates.num_rows == 0:
        return candidates
    ordered = candidates.sort_by([(ROUTE_ID, "ascending")]
                                 + [(name, "ascending") for name in Q3_ORDER])
    routes = ordered[ROUTE_ID].to_numpy()
    starts = np.flatnonzero(np.r_[True, routes[1:] != routes[:-1]])
    rank = np.arange(len(routes)) - np.repeat(starts, np.diff(np.r_[starts, len(routes)]))
    return ordered.filter(pa.array(rank < Q3_ROWS_PER_ROUTE_MAX))


def route_texts(route_ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """"ATL-BOS" of every route id, each distinct id decoded once."""
    ids = np.asarray(route_ids.to_numpy(zero_copy_only=False), dtype=np.int64)
    distinct, index = np.unique(ids, return_inverse=True)
    return pa.array([route_of(int(i)) for i in distinct], pa.string()).take(pa.array(index))


def _printed(rows: pa.Table, query: str) -> pa.Table:
    """The query's printed columns (QUERY_HEADERS order) of rows that carry them."""
    columns = {"legId": rows["legId"], "route": route_texts(rows[ROUTE_ID]),
               "totalFare": rows[FARE], "stopovers": rows[STOPOVERS],
               "totalDistance": rows[TOTAL_DISTANCE]}
    header = QUERY_HEADERS[query]
    return pa.table([columns[name] for name in header], names=list(header))


def sort_all(table: pa.Table) -> pa.Table:
    """Sorted by every column: equal keys are equal rows, so the order is a function of the
    rows (a -0.0 fare sorts equal to 0.0 but Spark's grouping made it 0.0 already)."""
    if table.num_rows == 0:
        return table
    return table.sort_by([(name, "ascending") for name in table.column_names])


def _sum(values) -> int:
    total = pc.sum(values).as_py()
    return int(total or 0)
