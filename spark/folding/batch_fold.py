"""What one micro-batch contributes to each session: its counts, Q1 and Q2 rows, Q3's candidates
and Q4's fares, from partials made where the rows were read.

    partial = partial_of(derived rows of one range)     # in a source worker (stream_fields)
    fold = fold_of([partials of one session in one micro-batch])    # on the driver

A `Partial` is a range's counts (rows, valid rows, invalid rows by kind, the valid rows Q2
skipped because an airport is unknown), its Q4 fares as (route_id, fare, n) with one row per
distinct pair, and its Q1 and Q2 rows (the few fields they print or Q3 ranks by). Nothing in a
partial depends on another range, so a micro-batch's fold is their sum:
- `q4`: the ranges' (route_id, fare, n) concatenated: the exact fare -> count map of each route,
  a pair possibly in several rows (Q4 takes the fares above the session's final mean at the
  finish, spark/folding/finish.py, after grouping);
- `q1`, `q2`: the rows, sorted by every column so that a micro-batch run again yields them in
  the same order (the result writer's row numbers and sequence numbers depend on it);
- `q3`: per route, the Q3_ROWS_PER_ROUTE_MAX shortest Q1 rows (docs/queries.md's order, then
  stopovers and travelDuration as spark.rules.query_frames.shortest_per_route breaks the last
  ties): the top 2 of a union is the top 2 of the parts' top 2s.

Pure functions over pyarrow tables; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.flights.result_csv import QUERY_HEADERS
from spark.rules.contract import INVALID_KINDS, Q3_ROWS_PER_ROUTE_MAX
from spark.rules.flight_fields import (
    DURATION_MINUTES,
    ENDPOINTS_KNOWN,
    FARE,
    INVALID_KIND,
    ROUTE_ID,
    STOPOVERS,
    TOTAL_DISTANCE,
)
from spark.rules.route_id import route_of

SESSION = "session"  # the session key column (spark/folding/session_files.session_key)
COUNT = "n"
Q4_SCHEMA = pa.schema([(ROUTE_ID, pa.int64()), (FARE, pa.float64()), (COUNT, pa.int64())])
# The Q1 and Q2 rows of a range: what either query prints or Q3 ranks by.
DETAIL_SCHEMA = pa.schema([(ROUTE_ID, pa.int64()), (FARE, pa.float64()), ("legId", pa.string()),
                           ("travelDuration", pa.string()), (DURATION_MINUTES, pa.int64()),
                           (STOPOVERS, pa.string()), (TOTAL_DISTANCE, pa.float64())])
# Q3's order within a route (spark.rules.query_frames.shortest_per_route).
Q3_ORDER = (DURATION_MINUTES, "legId", FARE, STOPOVERS, "travelDuration")
Q3_CANDIDATE_SCHEMA = pa.schema([(ROUTE_ID, pa.int64()), (DURATION_MINUTES, pa.int64()),
                                 ("legId", pa.string()), (FARE, pa.float64()),
                                 (STOPOVERS, pa.string()), ("travelDuration", pa.string())])


@dataclass(frozen=True)
class Partial:
    """What a source worker makes of one range's derived rows."""

    rows: int
    valid_rows: int
    q2_skipped: int
    invalid: dict[str, int]  # every kind of INVALID_KINDS, zeros included
    q4: pa.Table  # Q4_SCHEMA, one row per distinct (route, fare) of the range
    details: pa.Table  # DETAIL_SCHEMA: the Q1 and Q2 rows


@dataclass(frozen=True)
class BatchFold:
    rows: int
    valid_rows: int
    invalid: dict[str, int]  # every kind of INVALID_KINDS, zeros included
    q2_skipped: int
    q4: pa.Table  # Q4_SCHEMA (a (route, fare) may repeat: every use adds the counts)
    q1: pa.Table  # QUERY_HEADERS["q1"], sorted
    q2: pa.Table  # QUERY_HEADERS["q2"], sorted
    q3: pa.Table  # Q3_CANDIDATE_SCHEMA, at most Q3_ROWS_PER_ROUTE_MAX rows per route


def partial_of(derived: pa.Table) -> Partial:
    """The partial of rows in spark/rules/flight_fields.DERIVED_SCHEMA."""
    kinds = derived[INVALID_KIND]
    valid = derived.filter(pc.is_null(kinds))
    counted = pc.value_counts(kinds.drop_null()).to_pylist()
    invalid = dict.fromkeys(INVALID_KINDS, 0)
    for entry in counted:
        invalid[entry["values"]] = entry["counts"]
    known = pc.fill_null(valid[ENDPOINTS_KNOWN], False)
    details = derived.filter(pc.or_(pc.is_valid(derived[STOPOVERS]),
                                    pc.is_valid(derived[TOTAL_DISTANCE])))
    ones = pa.array(np.ones(valid.num_rows, np.int64))
    return Partial(rows=derived.num_rows, valid_rows=valid.num_rows,
                   q2_skipped=valid.num_rows - _sum(known.cast(pa.int64())), invalid=invalid,
                   q4=q4_part(pa.table([valid[ROUTE_ID], valid[FARE], ones], schema=Q4_SCHEMA)),
                   details=details.select(DETAIL_SCHEMA.names).cast(DETAIL_SCHEMA))


def fold_of(partials: list[Partial]) -> BatchFold:
    """One session's fold of a micro-batch: its ranges' partials together."""
    details = pa.concat_tables([partial.details for partial in partials])
    q1_rows = details.filter(pc.is_valid(details[STOPOVERS]))
    q2_rows = details.filter(pc.is_valid(details[TOTAL_DISTANCE]))
    return BatchFold(
        rows=sum(partial.rows for partial in partials),
        valid_rows=sum(partial.valid_rows for partial in partials),
        invalid={kind: sum(partial.invalid[kind] for partial in partials)
                 for kind in INVALID_KINDS},
        q2_skipped=sum(partial.q2_skipped for partial in partials),
        q4=pa.concat_tables([partial.q4 for partial in partials]),
        q1=sort_all(_printed(q1_rows, "q1")),
        q2=sort_all(_printed(q2_rows, "q2")),
        q3=shortest_per_route(q1_rows.select(Q3_CANDIDATE_SCHEMA.names)))


def q4_part(rows: pa.Table) -> pa.Table:
    """(route_id, fare, n) with one row per distinct (route_id, fare): the counts summed."""
    grouped = rows.group_by([ROUTE_ID, FARE], use_threads=False).aggregate([(COUNT, "sum")])
    return pa.table([grouped[ROUTE_ID], grouped[FARE], grouped[f"{COUNT}_sum"]],
                    schema=Q4_SCHEMA)


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
    """Sorted by every column: equal keys are equal rows (but for a -0.0 fare beside a 0.0 one,
    which the stable sort keeps in input order, itself the same in every run)."""
    if table.num_rows == 0:
        return table
    return table.sort_by([(name, "ascending") for name in table.column_names])


def _sum(values) -> int:
    total = pc.sum(values).as_py()
    return int(total or 0)
