"""airports.csv in the "Airports Opendatahub" layout, from `airportsdata`'s real coordinates.

File format (copied from the real airports-codepublic.csv): UTF-8 with a byte-order mark,
`;`-separated, CRLF line ends, one header row, 11 columns, `\\N` for nulls, quotes only where
a value holds `;`, a quote or a line break. Rows: every airport `airportsdata` knows by IATA
code (which includes every airport the itineraries use) plus the two odd codes of the real
file, in a seed-dependent order.
"""

import csv
import zlib
from pathlib import Path

import numpy as np

from scripts.datagen.countries import COUNTRY_COLUMNS
from scripts.datagen.network import known_airports

HEADER: tuple[str, ...] = (
    "Airport Code", "Airport Name", "City Name", "Country Name", "Country Code", "Latitude",
    "Longitude", "World Area Code", "City Name geo_name_id", "Country Name geo_name_id",
    "coordinates",
)
NULL = "\\N"
# Rows of the real file whose codes are not three letters; consumers must live with them.
QUIRK_ROWS: tuple[tuple[str, ...], ...] = (
    ("0A7", "Hendersonville Airport", "Hendersonville", "United States", "US", "35.316667",
     "-82.45", "67", "4628735", "6252001", "35.316667, -82.45"),
    ("---", "Herzlia", "Herzlia", "Israel", "IL", "32.180833", "34.833333", "636", NULL,
     "294640", "32.180833, 34.833333"),
)
CITY_GEO_ID_NULL_RATE = 0.43  # real file: 3,944 of 9,187
FLOAT_NOISE_RATE = 0.03  # real file prints ~3 % of coordinates as 26.733333000000002
_UNKNOWN_COUNTRY = (NULL, NULL, "")


def _coordinate(value: float, noisy: bool) -> str:
    # One unit in the last place reproduces the real file's float-printing artefacts.
    return repr(float(np.nextafter(value, np.inf)) if noisy else float(value))


def _city_geo_id(code: str, is_null: bool) -> str:
    """Stand-in for a GeoNames id (airportsdata has none): stable per airport code."""
    return NULL if is_null else str(3_000_000 + zlib.crc32(code.encode()) % 5_000_000)


def airport_rows(seed: int) -> list[tuple[str, ...]]:
    """Every row of airports.csv (header excluded), in the order they are written."""
    known = known_airports()
    rng = np.random.default_rng([seed, 0xA1])
    codes = sorted(known)
    null_city_id = rng.random(len(codes)) < CITY_GEO_ID_NULL_RATE
    noisy = rng.random((len(codes), 2)) < FLOAT_NOISE_RATE
    rows = list(QUIRK_ROWS)
    for i, code in enumerate(codes):
        airport = known[code]
        country_name, area_code, country_id = COUNTRY_COLUMNS.get(
            airport["country"], _UNKNOWN_COUNTRY
        )
        lat = _coordinate(airport["lat"], noisy[i, 0])
        lon = _coordinate(airport["lon"], noisy[i, 1])
        rows.append((
            code, airport["name"] or NULL, airport["city"] or NULL, country_name,
            airport["country"] or NULL, lat, lon, area_code, _city_geo_id(code, null_city_id[i]),
            country_id, f"{lat}, {lon}",
        ))
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def write_airports(path: Path, seed: int) -> int:
    """Write airports.csv to `path`; return the number of airport rows."""
    rows = airport_rows(seed)
    with path.open("w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out, delimiter=";", lineterminator="\r\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
    return len(rows)
