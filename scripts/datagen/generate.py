"""The data generator's library: `generate` writes DIR/itineraries.csv (27 columns, RFC-4180)
and DIR/airports.csv (Opendatahub layout) and returns a GenerationReport; FLIGHTS_FILE and
AIRPORTS_FILE name them for every reader (the launcher, the benchmarks, the tests).

Invariants: the same seed and arguments give the same bytes (CHUNK_ROWS is part of the output's
identity); rows are drawn in fixed-size chunks, each from its own seeded generator, so memory
stays flat at any N; each file is written under a temporary name and renamed when whole, so a
failed run leaves no file behind. The model: the other modules of
scripts/datagen/; the layouts: docs/queries.md.
Threads: `generate` draws chunks on a pool of WORKER_THREADS (numpy and pyarrow release the
GIL), at most CHUNKS_IN_FLIGHT_MAX in memory, and writes them in order on the caller's thread.
"""


import os
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scripts.datagen import csv_text, fares, invalid, itineraries
from scripts.datagen.airports_file import write_airports
from scripts.datagen.network import Network, build_network

FLIGHTS_FILE = "itineraries.csv"
AIRPORTS_FILE = "airports.csv"
CHUNK_ROWS = 50_000  # part of the output's identity: changing it changes every file
# numpy and pyarrow kernels release the GIL, so chunks are drawn by a small thread pool and
# written in order; at most CHUNKS_IN_FLIGHT_MAX are held in memory at once.
WORKER_THREADS = 2
CHUNKS_IN_FLIGHT_MAX = 3
DEFAULT_DUPLICATE_LEGID_RATE = 0.002


class GeneratorArgumentError(ValueError):
    """An argument of `generate` is outside its domain (negative rows, rate outside [0, 1])."""


@dataclass
class GenerationReport:
    """What one `generate` call wrote."""

    rows: int
    invalid_rows: dict[str, int]
    duplicate_legid_rows: int
    airports: int
    seconds: float
    flights_path: Path
    airports_path: Path
    bytes_written: int = 0
    invalid_total: int = field(init=False)

    def __post_init__(self) -> None:
        self.invalid_total = sum(self.invalid_rows.values())

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class _ChunkResult:
    data: memoryview
    invalid_rows: dict[str, int]
    duplicate_legid_rows: int


def _chunk_text(network: Network, seed: int, index: int, rows: int,
                invalid_rate: float, duplicate_legid_rate: float) -> _ChunkResult:
    rng = np.random.default_rng([seed, index])
    chunk = itineraries.draw_itineraries(rng, rows, network)
    chunk, repeated = itineraries.repeat_leg_ids(rng, chunk, duplicate_legid_rate)
    fares.price(rng, chunk, network)
    columns = csv_text.format_columns(chunk, network)
    injected = invalid.inject(rng, columns, invalid_rate)
    for name in csv_text.FREE_TEXT_COLUMNS:
        columns[name] = csv_text.quote_needed(columns[name])
    ordered = [columns[name] for name in csv_text.HEADER]
    lines = invalid.cut_short(csv_text.join_rows(ordered, has_nulls=False), ordered, injected)
    return _ChunkResult(csv_text.rows_buffer(lines), injected.counts, repeated)


def _chunk_results(network: Network, rows: int, seed: int, invalid_rate: float,
                   duplicate_legid_rate: float) -> Iterator[_ChunkResult]:
    """Every chunk's text in file order, drawn ahead by the worker threads."""
    sizes = enumerate(_chunk_sizes(rows))
    with ThreadPoolExecutor(max_workers=WORKER_THREADS) as pool:
        pending = deque()
        for index, size in sizes:
            pending.append(pool.submit(_chunk_text, network, seed, index, size, invalid_rate,
                                       duplicate_legid_rate))
            if len(pending) >= CHUNKS_IN_FLIGHT_MAX:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _chunk_sizes(rows: int) -> Iterator[int]:
    full, rest = divmod(rows, CHUNK_ROWS)
    yield from [CHUNK_ROWS] * full
    if rest:
        yield rest


def _check_arguments(rows: int, invalid_rate: float, duplicate_legid_rate: float) -> None:
    if rows < 0:
        raise GeneratorArgumentError(f"rows must be >= 0, got {rows}")
    for name, rate in (("invalid_rate", invalid_rate),
                       ("duplicate_legid_rate", duplicate_legid_rate)):
        if not 0.0 <= rate <= 1.0:
            raise GeneratorArgumentError(f"{name} must be within [0, 1], got {rate}")


def generate(out_dir: Path, rows: int, seed: int, invalid_rate: float = 0.0,
             duplicate_legid_rate: float = DEFAULT_DUPLICATE_LEGID_RATE) -> GenerationReport:
    """Write `out_dir`/itineraries.csv with `rows` data rows and `out_dir`/airports.csv.

    Each file is written under a temporary name and renamed when complete, so a file with
    the final name is always whole.
    """
    _check_arguments(rows, invalid_rate, duplicate_legid_rate)
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    flights_path, airports_path = out_dir / FLIGHTS_FILE, out_dir / AIRPORTS_FILE
    network = build_network()
    invalid_rows = dict.fromkeys(invalid.KINDS, 0)
    repeated = 0
    written = 0
    partial = flights_path.with_name(flights_path.name + ".partial")
    airports_partial = airports_path.with_name(airports_path.name + ".partial")
    try:
        with partial.open("wb") as out:
            written += out.write((",".join(csv_text.HEADER) + csv_text.LINE_END).encode())
            for result in _chunk_results(network, rows, seed, invalid_rate,
                                         duplicate_legid_rate):
                written += out.write(result.data)
                repeated += result.duplicate_legid_rows
                for kind, count in result.invalid_rows.items():
                    invalid_rows[kind] += count
        os.replace(partial, flights_path)
        airports = write_airports(airports_partial, seed)
        os.replace(airports_partial, airports_path)
    finally:
        # Only reached with a partial file left when writing failed or was interrupted.
        partial.unlink(missing_ok=True)
        airports_partial.unlink(missing_ok=True)
    return GenerationReport(
        rows=rows,
        invalid_rows=invalid_rows,
        duplicate_legid_rows=repeated,
        airports=airports,
        seconds=time.perf_counter() - started,
        flights_path=flights_path,
        airports_path=airports_path,
        bytes_written=written,
    )
