"""Folding without Spark, for unit tests: rows -> derived Arrow -> the aggregation Spark runs per
micro-batch (pyarrow's group_by, nulls grouped as Spark groups them) -> spark/folding."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark.airport_distances import AirportCoordinates
from spark.flight_fields import derive
from spark.folding.batch_fold import COUNT, FOLD_KEYS, SESSION
from spark.queries import FLIGHT_COLUMNS


def flights_table(rows: list[dict]) -> pa.Table:
    return pa.table({name: pa.array([row.get(name) for row in rows], pa.string())
                     for name in FLIGHT_COLUMNS})


def aggregated(rows: list[dict], airports: dict[str, tuple[float, float]],
               key: int) -> pa.Table:
    """`fold_aggregation` of one session's `rows`, computed by pyarrow."""
    derived = derive(flights_table(rows), AirportCoordinates(airports).to_json())
    derived = derived.append_column(SESSION, pa.array(np.full(derived.num_rows, key),
                                                      pa.int64()))
    derived = derived.append_column(COUNT, pa.array(np.ones(derived.num_rows, np.int64)))
    grouped = derived.group_by(list(FOLD_KEYS), use_threads=False).aggregate([(COUNT, "sum")])
    return pa.table([grouped[name] for name in FOLD_KEYS] + [grouped[f"{COUNT}_sum"]],
                    names=[*FOLD_KEYS, COUNT])
