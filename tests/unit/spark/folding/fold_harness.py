"""Folding without Spark, for unit tests: rows -> the partial a source worker makes of them
(spark/folding/stream_fields.fold_rows) -> spark/folding."""

from __future__ import annotations

import pyarrow as pa

from spark.folding.batch_fold import Partial, partial_of
from spark.rules.airport_distances import AirportCoordinates
from spark.rules.contract import FLIGHT_COLUMNS
from spark.rules.flight_fields import derive


def flights_table(rows: list[dict]) -> pa.Table:
    return pa.table({name: pa.array([row.get(name) for row in rows], pa.string())
                     for name in FLIGHT_COLUMNS})


def partial(rows: list[dict], airports: dict[str, tuple[float, float]]) -> Partial:
    """The partial a source worker makes of `rows` (one range)."""
    return partial_of(derive(flights_table(rows), AirportCoordinates(airports).to_json()))
