"""A session's known airports, read by the driver from `airports.<cid>` over exact offsets.

The client writes SessionStarted once its airports are acknowledged, with their end offsets;
the driver reads [log start, end) of every partition (a few hundred KB: 7,886 airports in the
real file) and applies spark.rules.query_frames.prepare_airports' rules in pyarrow: an airport is
known when its code is non-empty and both coordinates are plain decimal literals
(spark.rules.flight_fields.parse_number, docs/queries.md's number rule) that are finite; a code
listed twice keeps its smallest (latitude, longitude). A header whose first name kept a byte-order
mark is read as the name without it.

Thread-safety: `read_airports` opens its own connection; call from any thread.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from common.flights.arrow_rows import read_rows
from common.kaska.range_reader import RangeReader
from spark.rules.airport_distances import AirportCoordinates
from spark.rules.contract import (
    AIRPORT_CODE,
    AIRPORT_COLUMNS,
    AIRPORT_LATITUDE,
    AIRPORT_LONGITUDE,
    BYTE_ORDER_MARK,
)
from spark.rules.flight_fields import parse_number


def read_airports(reader: RangeReader, topic: str, end_offsets: list[int]) -> AirportCoordinates:
    """The known airports of `topic`'s records below `end_offsets` (one per partition)."""
    tables = []
    for partition, end in enumerate(end_offsets):
        start, _ = reader.offsets(topic, partition)
        for record in reader.read(topic, partition, start, end):
            tables.append(_airport_columns(record.value))
    return known_airports(tables)


def _airport_columns(payload) -> pa.Table:
    table = read_rows(payload, None)
    names = [name.removeprefix(BYTE_ORDER_MARK) for name in table.column_names]
    table = table.rename_columns(names)
    return pa.table([table[name] if name in names else pa.nulls(table.num_rows, pa.string())
                     for name in AIRPORT_COLUMNS], names=list(AIRPORT_COLUMNS))


def known_airports(tables: list[pa.Table]) -> AirportCoordinates:
    """spark.rules.query_frames.prepare_airports over the rows of `tables` (AIRPORT_COLUMNS,
    strings)."""
    by_code: dict[str, tuple[float, float]] = {}
    for table in tables:
        codes = pc.cast(table[AIRPORT_CODE], pa.string())
        latitudes = parse_number(pc.cast(table[AIRPORT_LATITUDE], pa.string())).to_pylist()
        longitudes = parse_number(pc.cast(table[AIRPORT_LONGITUDE], pa.string())).to_pylist()
        for code, latitude, longitude in zip(codes.to_pylist(), latitudes, longitudes,
                                             strict=True):
            if not code or latitude is None or longitude is None:
                continue
            if not (math.isfinite(latitude) and math.isfinite(longitude)):
                continue
            place = (latitude, longitude)
            if code not in by_code or place < by_code[code]:
                by_code[code] = place
    return AirportCoordinates(by_code)
