"""Warming the query service before it takes sessions: one run of Q1-Q4 over a small sample.

Why: a fresh Spark application pays for its first job far more than for its data — class
loading, query planning and code generation, the JIT, starting the Python workers that plan
and read a Python data source. Measured at 200k rows on 2 cores, the service's first session
took 35 s of query phase against ~4 s for the same queries once warm. The service runs the
very plan a session runs (the airports collected, then `compute_all_derived` over flights
derived by `spark.rules.flight_fields.derive` in the source's reader, as the `kaska` source's
`arrowTransform` does: the same expressions, cache, window and aggregations; every query's rows
collected, ordered and formatted as a session job writes them, `result_order.py`) once at
start, over
`sample_rows` generated rows, so that cost is paid before it says it is up, not by the first
user. The sample is large enough for the JIT to compile the hot paths with C2 too: with 20k
rows the first 2M-row session still spent ~5 CPU-s in the JVM's C2 compiler threads (the query
service 18.4 CPU-s against 13.3 for the next session); with 200k rows it took 15.9 CPU-s and
14.4 s instead of 15.9 s, for 1.4 s more at start (2026-11-26, `bench_pipeline`).

The sample comes through `warm_up_sample`, a Python data source that yields Arrow batches
from its reader, as the `kaska` source does: the data-source worker processes (create, plan,
read) start here too. Its rows cover every branch of the plan: each validity rule failed once,
itineraries of 1 to 4 segments, given and missing total distances, an airport missing from
the airports file, so that no operator is first compiled on a user's session.

Nothing touches the broker: a service that cannot warm up (an error from Spark) logs it and
serves anyway, cold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StringType, StructField, StructType

from spark.rules.contract import AIRPORT_COLUMNS, FLIGHT_COLUMNS
from spark.rules.derived_queries import airport_coordinates, compute_all_derived
from spark.rules.flight_fields import DERIVED_SCHEMA, derive
from spark.rules.result_order import sorted_result_rows

log = logging.getLogger(__name__)

SOURCE_NAME = "warm_up_sample"
SAMPLE_ROWS_DEFAULT = 200_000
SAMPLE_PARTITIONS = 2  # both local cores, or two executors, read at once

# (startingAirport, destinationAirport, travelDuration, totalFare, totalTravelDistance,
#  segmentsArrivalAirportCode): templates cycled over the sample's rows.
_FLIGHT_TEMPLATES = (
    ("ATL", "BOS", "PT2H29M", "248.6", "947", "BOS"),
    ("ATL", "BOS", "PT7H", "310.1", "", "CLT||BOS"),
    ("JFK", "LAX", "P1DT19M", "512.0", "", "ORD||DEN||PHX||LAX"),
    ("JFK", "LAX", "PT9H22M", "2405.7", "12000", "ORD||DFW||DEN||LAX"),  # a Q2 detour
    ("LAX", "ZZZ", "PT58M", "99.9", "", "ZZZ"),  # destination missing from the airports
    ("", "BOS", "PT1H", "1", "1", "BOS"),  # bad airport code
    ("ATL", "BOS", "2H", "1", "1", "BOS"),  # bad duration
    ("ATL", "BOS", "PT1H", "1.5d", "1", "BOS"),  # bad fare
    ("ATL", "BOS", "PT1H", "1", "1", ""),  # empty segments
)
_AIRPORTS = (("ATL", "33.6367", "-84.4281"), ("BOS", "42.3643", "-71.0052"),
             ("CLT", "35.2140", "-80.9431"), ("JFK", "40.6398", "-73.7789"),
             ("LAX", "33.9425", "-118.4081"), ("ORD", "41.9786", "-87.9048"),
             ("DEN", "39.8617", "-104.6732"), ("PHX", "33.4343", "-112.0116"),
             ("DFW", "32.8968", "-97.0380"))


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


class WarmUpError(RuntimeError):
    """The sample's queries did not give the results the sample is built to give."""


def sample_flights(first_row: int, rows: int) -> pa.RecordBatch:
    """Rows [first_row, first_row + rows) of the sample, as the flights columns (strings);
    built columnar (a few hundred thousand rows cost a fraction of a second)."""
    numbers = np.arange(first_row, first_row + rows, dtype=np.int64)
    templates = pa.array(numbers % len(_FLIGHT_TEMPLATES))
    columns = {FLIGHT_COLUMNS[0]: _leg_ids(numbers)}
    for i, name in enumerate(FLIGHT_COLUMNS[1:]):
        values = pa.array([template[i] for template in _FLIGHT_TEMPLATES], pa.string())
        columns[name] = values.take(templates)
    return pa.record_batch(columns)


def _leg_ids(numbers: np.ndarray) -> pa.Array:
    """Each row number as 32 lowercase hex digits (`f"{n:032x}"`); row 0's is empty, so the
    first validity rule fails once too."""
    shifts = np.arange(60, -4, -4, dtype=np.int64)  # 16 nibbles of 64 bits, high first
    text = np.full((len(numbers), 32), ord("0"), dtype=np.uint8)
    text[:, 16:] = _HEX_DIGITS[(numbers[:, None] >> shifts) & 0xF]
    ids = pa.array(text.view("S32").ravel(), pa.binary()).cast(pa.string())
    return pc.if_else(pa.array(numbers == 0), pa.scalar("", pa.string()), ids)


def sample_airports() -> pa.RecordBatch:
    return pa.record_batch({name: [airport[i] for airport in _AIRPORTS]
                            for i, name in enumerate(AIRPORT_COLUMNS)})


def _schema(columns: tuple[str, ...]) -> StructType:
    return StructType([StructField(name, StringType(), True) for name in columns])


class _RowRange(InputPartition):
    def __init__(self, first_row: int, rows: int) -> None:
        self.first_row = first_row
        self.rows = rows


class WarmUpSource(DataSource):
    """`spark.read.format("warm_up_sample").option("table", "flights"|"airports")`; the
    flights' fields derived given the airports' `coordinates` (`AirportCoordinates` JSON)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        if self.options.get("table") == "airports":
            return _schema(AIRPORT_COLUMNS)
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(DERIVED_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SampleReader(self.options.get("table", "flights"),
                             int(self.options.get("rows", SAMPLE_ROWS_DEFAULT)),
                             self.options.get("coordinates", "{}"))


class _SampleReader(DataSourceReader):
    def __init__(self, table: str, rows: int, coordinates_json: str) -> None:
        self.table = table
        self.rows = rows
        self.coordinates_json = coordinates_json

    def partitions(self) -> list[InputPartition]:
        if self.table == "airports":
            return [_RowRange(0, len(_AIRPORTS))]
        step = -(-self.rows // SAMPLE_PARTITIONS)
        return [_RowRange(first, min(step, self.rows - first))
                for first in range(0, self.rows, step)]

    def read(self, partition: _RowRange) -> Iterator[pa.RecordBatch]:
        if self.table == "airports":
            yield sample_airports()
        else:
            yield from derive(pa.Table.from_batches([
                sample_flights(partition.first_row, partition.rows)]),
                self.coordinates_json).to_batches()


def warm_up(spark, sample_rows: int = SAMPLE_ROWS_DEFAULT) -> float:
    """Run Q1-Q4 over the sample as a session job does; the seconds it took."""
    started = time.monotonic()
    spark.dataSource.register(WarmUpSource)
    reader = spark.read.format(SOURCE_NAME).option("rows", str(sample_rows))
    coordinates = airport_coordinates(reader.option("table", "airports").load())
    flights = reader.option("table", "flights").option("coordinates", coordinates.to_json())
    results = compute_all_derived(flights.load())
    try:
        # Collected the way a session job writes them (result_order.py): the same plans, so
        # the same generated classes, which Spark's code cache then serves to the first
        # session instead of compiling them for it.
        counts = {query: sum(1 for _row in sorted_result_rows(query, frame, results.rows))
                  for query, frame in results.frames().items()}
    finally:
        results.release()
    _check(results.rows, counts, sample_rows)
    return time.monotonic() - started


def _check(rows: int, counts: dict[str, int], sample_rows: int) -> None:
    # Every template row with >= 3 stopovers is a Q1 row; each route has two; Q4 has routes
    # above the mean. A sample that yields nothing would warm nothing up.
    if rows != sample_rows or not all(counts.values()):
        raise WarmUpError(f"warm-up sample of {sample_rows} rows gave {rows} rows and result "
                          f"rows {counts}")
