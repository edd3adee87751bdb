"""Fixtures of the Compose end-to-end tests: the project image, one generated data set with
malformed rows (shared, read-only), its reference results, and a fresh deployment per test."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.generate_data import AIRPORTS_FILE, FLIGHTS_FILE, generate
from tests.e2e.compose_deployment import ComposeDeployment
from tests.reference_queries import ReferenceResults, compute_files
from tests.result_compare import QUERY_COLUMNS, assert_all_results

REPO = Path(__file__).resolve().parents[2]
E2E_ROWS = 40_000
E2E_SEED = 7
E2E_INVALID_RATE = 0.02
IMAGE_BUILD_TIMEOUT_S = 1800
# Lines the client's reader must reject before anything reaches the broker (the generator's
# invalid rows are well-formed CSV that the queries reject; these are not even that).
UNDECODABLE_LINE = b"\xff\xfe\xfdbad" + b",x" * 26 + b"\n"
SHORT_LINE = b"only,three,fields\n"


@dataclass(frozen=True)
class E2EData:
    directory: Path  # holds FLIGHTS_FILE (with the malformed lines) and AIRPORTS_FILE
    reference: ReferenceResults  # of the file without the malformed lines


@pytest.fixture(scope="session")
def project_image() -> str:
    """flights-optimizer:latest built from this tree (seconds when only the code changed)."""
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run([str(REPO / "scripts" / "build_images.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=IMAGE_BUILD_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return "flights-optimizer:latest"


@pytest.fixture(scope="session")
def e2e_data(tmp_path_factory) -> E2EData:
    clean = tmp_path_factory.mktemp("e2e-clean")
    generate(clean, rows=E2E_ROWS, seed=E2E_SEED, invalid_rate=E2E_INVALID_RATE)
    reference = compute_files(clean / FLIGHTS_FILE, clean / AIRPORTS_FILE)
    dirty = tmp_path_factory.mktemp("e2e-data")
    lines = (clean / FLIGHTS_FILE).read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    (dirty / FLIGHTS_FILE).write_bytes(
        b"".join(lines[:middle] + [UNDECODABLE_LINE, SHORT_LINE] + lines[middle:]))
    (dirty / AIRPORTS_FILE).write_bytes((clean / AIRPORTS_FILE).read_bytes())
    # The clients run as this user; others (the image's user, if it differs) only read.
    dirty.chmod(0o755)
    return E2EData(dirty, reference)


@pytest.fixture
def deployment(project_image, e2e_data, tmp_path):
    """A fresh deployment of compose/docker-compose-dev.yaml (not started); always torn down,
    its containers' log tails printed (pytest shows them when the test fails)."""
    deployment = ComposeDeployment(e2e_data.directory, tmp_path / "results",
                                   image=project_image)
    try:
        yield deployment
    finally:
        if deployment.containers():
            print(deployment.diagnostics(tail_lines=80))
            deployment.down()


def assert_results_exact(results_dir: Path, data: E2EData) -> dict:
    """q1.csv ... q4.csv equal the reference row for row; returns summary.json."""
    actual = {}
    for query in QUERY_COLUMNS:
        with open(results_dir / f"{query}.csv", newline="") as file:
            header, *rows = csv.reader(file)
        assert tuple(header) == QUERY_COLUMNS[query]
        actual[query] = rows
    assert_all_results(actual, data.reference.by_query())
    summary = json.loads((results_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    rejected = summary["rows_rejected"]["flights"]
    assert rejected["undecodable_bytes"] >= 1 and rejected["wrong_field_count"] >= 2, rejected
    # Every data line was either sent once or rejected once, resumed sessions included.
    data_lines = len((data.directory / FLIGHTS_FILE).read_bytes().splitlines()) - 1
    assert summary["rows_sent"]["flights"] + sum(rejected.values()) == data_lines
    return summary
