"""The text of itineraries.csv: value formats of the real Kaggle file, RFC-4180 rows.

Every column is built as a pyarrow string array with vectorised kernels and lookup tables
(dates, local times, ISO durations), never one Python call per row. pyarrow's own CSV writer
is not used for the rows because its `quoting_style="needed"` quotes every string value,
while the real file quotes nothing but values holding a comma, a quote or a line break.
"""

from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from scripts.datagen import itineraries as itin
from scripts.datagen.chunk import ItineraryChunk
from scripts.datagen.fares import CABINS
from scripts.datagen.network import EPOCH0_S, TIME_AXIS_DAYS, Network
from scripts.datagen.routing import AIRLINES

HEADER: tuple[str, ...] = (
    "legId", "searchDate", "flightDate", "startingAirport", "destinationAirport",
    "fareBasisCode", "travelDuration", "elapsedDays", "isBasicEconomy", "isRefundable",
    "isNonStop", "baseFare", "totalFare", "seatsRemaining", "totalTravelDistance",
    "segmentsDepartureTimeEpochSeconds", "segmentsDepartureTimeRaw",
    "segmentsArrivalTimeEpochSeconds", "segmentsArrivalTimeRaw", "segmentsArrivalAirportCode",
    "segmentsDepartureAirportCode", "segmentsAirlineName", "segmentsAirlineCode",
    "segmentsEquipmentDescription", "segmentsDurationInSeconds", "segmentsDistance",
    "segmentsCabinCode",
)
SEGMENT_SEPARATOR = "||"
LINE_END = "\n"  # the real 999-row sample ends lines with LF (the 1000-row one with CRLF)
TRAVEL_MINUTES_MAX = 7 * 1440
_OFFSET_MINUTES_MIN = -12 * 60
_OFFSET_MINUTES_MAX = 14 * 60
WALL_CLOCK_CHARS = len("2022-04-17T19:55:00.000")
UTC_OFFSET_CHARS = len("-04:00")
EPOCH_SECONDS_CHARS = 10
_NEEDS_QUOTES = '[",\r\n]'
_NEEDS_QUOTES_BYTE = np.zeros(256, dtype=bool)
_NEEDS_QUOTES_BYTE[list(b'",\r\n')] = True
# Columns whose values can hold a comma or a quote. Every other column is printed from numbers
# or from lookup tables that hold none (checked by `_tables`), so it never needs quoting.
FREE_TEXT_COLUMNS: tuple[str, ...] = ("segmentsAirlineName", "segmentsEquipmentDescription")


def iso_duration(minutes: int) -> str:
    """ISO-8601 duration as the real file writes it: PT2H29M, PT58M, PT7H, P1DT19M."""
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    text = "P" + (f"{days}D" if days else "")
    if hours or mins or not days:
        text += "T" + (f"{hours}H" if hours else "") + (f"{mins}M" if mins or not hours else "")
    return text


def _utc_offset_text(minutes: int) -> str:
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{mins:02d}"


@cache
def _tables() -> dict[str, pa.Array]:
    """Lookup tables shared by every chunk (built once per process)."""
    minutes = np.arange(TIME_AXIS_DAYS * 1440, dtype=np.int64)
    instants = np.datetime64(EPOCH0_S, "s") + minutes * np.timedelta64(60, "s")
    days = np.datetime64(EPOCH0_S, "s").astype("datetime64[D]") + np.arange(TIME_AXIS_DAYS)
    offsets = range(_OFFSET_MINUTES_MIN, _OFFSET_MINUTES_MAX + 1)
    seconds_text = np.datetime_as_string(instants, unit="s").astype(f"S{WALL_CLOCK_CHARS - 4}")
    wall_clock = np.concatenate(
        (seconds_text.view(np.uint8).reshape(len(minutes), -1),
         np.broadcast_to(np.frombuffer(b".000", dtype=np.uint8), (len(minutes), 4))),
        axis=1,
    )
    tables = {
        "wall_clock": wall_clock,
        "epoch_seconds": _fixed_width_bytes(
            pc.cast(pa.array(EPOCH0_S + minutes * 60), pa.string()), EPOCH_SECONDS_CHARS
        ),
        "utc_offset": _fixed_width_bytes(
            pa.array([_utc_offset_text(m) for m in offsets]), UTC_OFFSET_CHARS
        ),
        "date": pa.array(days.astype(str)),
        "duration": pa.array([iso_duration(m) for m in range(TRAVEL_MINUTES_MAX + 1)]),
        "cents": pa.array([f"{c:02d}" for c in range(100)]),
        "bool": pa.array(["False", "True"]),
        "fare_basis": pa.array(itin.FARE_BASIS_CODES),
        "cabin": pa.array(CABINS),
        "airline_name": pa.array([a.name for a in AIRLINES]),
        "airline_code": pa.array([a.code for a in AIRLINES]),
        "equipment": pa.array(itin.EQUIPMENT),
    }
    for name in ("fare_basis", "cabin", "airline_code"):
        assert not pc.any(pc.match_substring_regex(tables[name], _NEEDS_QUOTES)).as_py(), name
    return tables


def _fixed_width_bytes(strings: pa.Array, width: int) -> np.ndarray:
    """Equal-length ASCII strings as a (len, width) uint8 matrix, for row-gather by numpy."""
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)
    assert len(data) >= len(strings) * width and pc.all(
        pc.equal(pc.utf8_length(strings), width)
    ).as_py(), "strings are not all of the declared width"
    return data[: len(strings) * width].reshape(len(strings), width)


def _from_fixed_width(rows: np.ndarray) -> pa.StringArray:
    """(n, width) uint8 ASCII matrix -> n strings."""
    n, width = rows.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(rows))
    )


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_strings(raw: np.ndarray) -> pa.StringArray:
    """(n, k) bytes -> n lowercase hex strings of 2k characters, without a per-row loop."""
    n, width = raw.shape
    digits = np.empty((n, width, 2), dtype=np.uint8)
    digits[..., 0] = np.take(_HEX_DIGITS, raw >> 4)
    digits[..., 1] = np.take(_HEX_DIGITS, raw & 15)
    return _from_fixed_width(digits.reshape(n, 2 * width))


def _text(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _money(cents: np.ndarray) -> pa.Array:
    """Cents -> '248.60' (two decimals always, as the real file)."""
    whole, frac = np.divmod(cents, 100)
    return pc.binary_join_element_wise(_text(whole), pc.take(_tables()["cents"], frac), ".")


def _local_times(utc_minute: np.ndarray, offset_minutes: np.ndarray) -> pa.Array:
    """'2022-04-17T19:55:00.000-04:00': local wall time then its UTC offset."""
    tables = _tables()
    # np.take gathers rows several times faster than fancy indexing here.
    wall = np.take(tables["wall_clock"], utc_minute + offset_minutes, axis=0)
    zone = np.take(tables["utc_offset"], offset_minutes - _OFFSET_MINUTES_MIN, axis=0)
    return _from_fixed_width(np.concatenate((wall, zone), axis=1))


def _epoch_seconds(utc_minute: np.ndarray) -> pa.Array:
    """Whole-minute instants as epoch seconds ('1650191400'; 10 digits until 2286)."""
    return _from_fixed_width(np.take(_tables()["epoch_seconds"], utc_minute, axis=0))


def quote_needed(values: pa.Array) -> pa.Array:
    """RFC-4180 minimal quoting: wrap (and double inner quotes) only where it is required.

    The rows to quote are found by one numpy pass over the string bytes, so a column that
    needs no quotes costs a scan and nothing else.
    """
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + len(values) + 1
    ]
    data = values.buffers()[2]
    if data is None or offsets[-1] == offsets[0]:
        return values
    text = np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]
    hits = np.flatnonzero(np.take(_NEEDS_QUOTES_BYTE, text)) + offsets[0]
    if len(hits) == 0:
        return values
    rows = np.unique(np.searchsorted(offsets, hits, side="right") - 1)
    chosen = pc.take(values, rows)
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(chosen, '"', '""'), '"', "")
    mask = np.zeros(len(values), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(values, pa.array(mask), quoted)


def _segment_columns(chunk: ItineraryChunk, network: Network) -> dict[str, pa.Array]:
    """The eleven `||`-joined segment columns."""
    tables = _tables()
    offsets = pa.array(chunk.segment_start.astype(np.int32))
    codes = pa.array(network.codes)
    dep, arr = chunk.dep_utc_minute, chunk.arr_utc_minute
    known = np.repeat(chunk.distances_known, chunk.segment_count)
    flat = {
        "segmentsDepartureTimeEpochSeconds": _epoch_seconds(dep),
        "segmentsDepartureTimeRaw": _local_times(dep, chunk.dep_offset_minutes),
        "segmentsArrivalTimeEpochSeconds": _epoch_seconds(arr),
        "segmentsArrivalTimeRaw": _local_times(arr, chunk.arr_offset_minutes),
        "segmentsArrivalAirportCode": pc.take(codes, chunk.arr_node),
        "segmentsDepartureAirportCode": pc.take(codes, chunk.dep_node),
        "segmentsAirlineName": pc.take(tables["airline_name"], chunk.airline),
        "segmentsAirlineCode": pc.take(tables["airline_code"], chunk.airline),
        "segmentsEquipmentDescription": pc.take(tables["equipment"], chunk.equipment),
        "segmentsDurationInSeconds": _text((arr - dep) * 60),
        "segmentsDistance": pc.if_else(known, _text(chunk.distance_miles), "None"),
        "segmentsCabinCode": pc.take(
            tables["cabin"], np.repeat(chunk.cabin, chunk.segment_count)
        ),
    }
    return {
        name: pc.binary_join(pa.ListArray.from_arrays(offsets, values), SEGMENT_SEPARATOR)
        for name, values in flat.items()
    }


def format_columns(chunk: ItineraryChunk, network: Network) -> dict[str, pa.Array]:
    """All 27 columns of `chunk` as string arrays, in HEADER order, unquoted."""
    tables = _tables()
    codes = pa.array(network.codes)
    n = chunk.rows
    total_distance = np.add.reduceat(chunk.distance_miles, chunk.segment_start[:-1])
    columns = {
        "legId": hex_strings(chunk.leg_id),
        "searchDate": pc.take(tables["date"], chunk.search_day),
        "flightDate": pc.take(tables["date"], chunk.flight_day),
        "startingAirport": pc.take(codes, chunk.start_node),
        "destinationAirport": pc.take(codes, chunk.dest_node),
        "fareBasisCode": pc.take(tables["fare_basis"], chunk.fare_basis),
        "travelDuration": pc.take(tables["duration"], chunk.travel_minutes),
        "elapsedDays": _text(chunk.elapsed_days),
        "isBasicEconomy": pc.take(tables["bool"], chunk.basic_economy.astype(np.int8)),
        "isRefundable": pc.take(tables["bool"], np.zeros(n, dtype=np.int8)),
        "isNonStop": pc.take(tables["bool"], (chunk.segment_count == 1).astype(np.int8)),
        "baseFare": _money(chunk.base_fare_cents),
        "totalFare": _money(chunk.total_fare_cents),
        "seatsRemaining": _text(chunk.seats_remaining),
        "totalTravelDistance": pc.if_else(chunk.distances_known, _text(total_distance), ""),
        **_segment_columns(chunk, network),
    }
    return {name: columns[name] for name in HEADER}


def join_rows(columns: list[pa.Array], has_nulls: bool) -> pa.Array:
    """One CSV line per row, line end included. Null cells (cut-short rows) are left out."""
    # Skipping nulls costs a third more; only chunks with cut-short rows pay for it.
    lines = pc.binary_join_element_wise(
        *columns, ",", null_handling="skip" if has_nulls else "emit_null"
    )
    return pc.binary_join_element_wise(lines, "", LINE_END)


def rows_buffer(lines: pa.Array) -> memoryview:
    """The bytes of every line, back to back, without copying them."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset :]
    return memoryview(lines.buffers()[2])[offsets[0] : offsets[len(lines)]]
