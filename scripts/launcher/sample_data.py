"""The input files of a run: given, or a generated sample reused when it was made with the same
parameters (a `sample.json` marker beside the files records them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE, generate
from scripts.launcher import console

MARKER_FILE = "sample.json"


@dataclass(frozen=True)
class InputFiles:
    flights: Path
    airports: Path


def sample_files(directory: Path, rows: int, seed: int, invalid_rate: float) -> InputFiles:
    """Generated data in `directory`, reused when it was made with the same parameters."""
    files = InputFiles(directory / FLIGHTS_FILE, directory / AIRPORTS_FILE)
    marker = directory / MARKER_FILE
    wanted = {"rows": rows, "seed": seed, "invalid_rate": invalid_rate}
    if files.flights.exists() and files.airports.exists() and marker.exists() and \
            json.loads(marker.read_text()) == wanted:
        console.say(f"  reusing the sample in {directory} ({rows:,} rows, seed {seed})")
        return files
    report = generate(directory, rows=rows, seed=seed, invalid_rate=invalid_rate)
    marker.write_text(json.dumps(wanted))
    console.say(f"  generated {rows:,} rows (seed {seed}, {report.invalid_total:,} malformed) "
                f"in {directory} in {report.seconds:.1f} s")
    return files
