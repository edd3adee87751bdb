"""Folding without Spark, for unit tests: rows -> the partial a source worker makes of them
(spark/folding/stream_fields) -> spark/folding."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark.airport_distances import AirportCoordinates
from spark.flight_fields import derive
from spark.folding.batch_fold import SESSION
from spark.folding.stream_fields import aggregate_rows
from spark.queries import FLIGHT_COLUMNS


def flights_table(rows: list[dict]) -> pa.Table:
    return pa.table({name: pa.array([row.get(name) for row in rows], pa.string())
                     for name in FLIGHT_COLUMNS})


def aggregated(rows: list[dict], airports: dict[str, tuple[float, float]],
               key: int) -> pa.Table:
    """The aggregate of one session's `rows`, as a source worker makes it."""
    derived = derive(flights_table(rows), AirportCoordinates(airports).to_json())
    return aggregate_rows(derived.append_column(
        SESSION, pa.array(np.full(derived.num_rows, key), pa.int64())))
