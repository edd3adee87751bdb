"""One client session's input and its reference: generated data (scripts/datagen) with lines
the client's reader must reject in the middle of the flights, and the results docs/queries.md gives
for the data without them (oracle/session_check.py judges a session against them).

Shared by `python -m scripts.chaos_verify` and the e2e tests (tests/e2e/conftest.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from oracle.session_check import SessionData, reference_of, write_with_malformed_lines
from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE, generate


def prepare_session_data(clean: Path, dirty: Path, rows: int, seed: int,
                         invalid_rate: float, reference: str = "python") -> SessionData:
    """Generates `rows` rows into `clean`, computes their reference (`reference`: one of
    oracle.session_check.REFERENCES), and writes into `dirty` the same files with the
    malformed lines in the middle of the flights."""
    generate(clean, rows=rows, seed=seed, invalid_rate=invalid_rate)
    results = reference_of(clean / FLIGHTS_FILE, clean / AIRPORTS_FILE, reference)
    dirty.mkdir(parents=True, exist_ok=True)
    flight_lines = write_with_malformed_lines(clean / FLIGHTS_FILE, dirty / FLIGHTS_FILE)
    shutil.copyfile(clean / AIRPORTS_FILE, dirty / AIRPORTS_FILE)
    # Containers' clients run as the calling user; others (the image's user) only read.
    dirty.chmod(0o755)
    return SessionData(dirty, results, flight_lines)
