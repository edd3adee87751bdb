"""Warming the streaming fold before the service says it is up: the Python workers and the
driver's fold run once over a generated sample, and the stream has made its first trigger.

Why: a fresh service's first session paid for what no later session pays: the stream's start
(its source runner process, the checkpoint's first files, the first `latestOffset`) and cold
Python workers (each imports pyarrow, numpy and the fold's modules before its first range).
The fold's plan itself is made once per service whatever happens, so one pass over a sample,
through the same functions a micro-batch runs (derive and `partial_of` in a Python worker via
`mapInArrow`, the partials collected as Arrow, `fold_of` on the driver), leaves the workers
Spark reuses for the source's reads warm.

The sample is spark/service/warm_up.py's (every validity rule failed once, 1 to 4 segments, given
and missing distances, an airport missing from the airports file). Nothing touches the broker; a
failure logs and leaves the service cold.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from spark.folding.airports import known_airports
from spark.folding.batch_fold import fold_of, partial_of
from spark.folding.stream_fields import PARTIAL_SCHEMA, partial_row, partials_by_session
from spark.rules.flight_fields import derive
from spark.service.warm_up import WarmUpError, sample_airports, sample_flights

SAMPLE_ROWS_DEFAULT = 20_000
SAMPLE_PARTITIONS = 2  # both local cores, or two executors
SAMPLE_KEY = 0


def warm_up_fold(spark, sample_rows: int = SAMPLE_ROWS_DEFAULT) -> float:
    """One pass of the fold over `sample_rows` generated rows; the seconds it took."""
    started = time.monotonic()
    coordinates = known_airports([pa.Table.from_batches([sample_airports()])]).to_json()
    flights = spark.createDataFrame(pa.Table.from_batches([sample_flights(0, sample_rows)])) \
        .repartition(SAMPLE_PARTITIONS)

    def fold_batches(batches):
        for batch in batches:
            table = pa.Table.from_batches([batch])
            partial = partial_of(derive(table, coordinates))
            yield from partial_row(SAMPLE_KEY, partial).to_batches()

    partials = flights.mapInArrow(fold_batches, from_arrow_schema(PARTIAL_SCHEMA)).toArrow()
    folds = {key: fold_of(parts) for key, parts in partials_by_session(partials).items()}
    _check(folds, sample_rows)
    return time.monotonic() - started


def _check(folds: dict, sample_rows: int) -> None:
    fold = folds.get(SAMPLE_KEY)
    if fold is None or fold.rows != sample_rows or not (fold.q1.num_rows and fold.q2.num_rows
                                                        and fold.q4.num_rows):
        raise WarmUpError(f"the fold's warm-up over {sample_rows} sample rows gave {fold}")

