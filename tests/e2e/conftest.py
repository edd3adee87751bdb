"""Fixtures of the Compose end-to-end tests: the project image, one generated data set with
malformed rows (shared, read-only), its reference results, and a fresh deployment per test."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.session_check import SessionData, session_problems
from scripts.deploy.deployment import ComposeDeployment
from scripts.verify.session_data import prepare_session_data

REPO = Path(__file__).resolve().parents[2]
E2E_ROWS = 40_000
E2E_SEED = 7
E2E_INVALID_RATE = 0.02
IMAGE_BUILD_TIMEOUT_S = 1800
PACED_UPLOAD_ROWS_PER_S = 1000  # E2E_ROWS uploaded in >= 40 s
# ~170 rows a message: at the paced rate an acknowledgement every ~0.2 s, so a fault test sees
# the upload move (or not) within a broker's ~2 s down time; the default 1 MiB slices would
# make one message every ~3 s.
PACED_SLICE_BYTES = 64 * 1024


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
def e2e_data(tmp_path_factory) -> SessionData:
    return prepare_session_data(tmp_path_factory.mktemp("e2e-clean"),
                                tmp_path_factory.mktemp("e2e-data"), E2E_ROWS, E2E_SEED,
                                E2E_INVALID_RATE)


@contextlib.contextmanager
def fresh_deployment(image: str, data: SessionData, results_dir: Path,
                     settings: dict[str, str] | None = None):
    """A fresh deployment of compose/docker-compose-dev.yaml (not started); always torn down,
    its containers' log tails printed (pytest shows them when the test fails)."""
    deployment = ComposeDeployment(data.directory, results_dir, image=image, settings=settings)
    try:
        yield deployment
    finally:
        if deployment.containers():
            print(deployment.diagnostics(tail_lines=80))
            deployment.down()


@pytest.fixture
def deployment(project_image, e2e_data, tmp_path):
    """A fresh deployment of its own, for a test that takes it apart (kills, down)."""
    with fresh_deployment(project_image, e2e_data, tmp_path / "results") as made:
        yield made


def pytest_collection_modifyitems(config, items):
    """The shared deployment's users run one after the other, from where the first of them
    stands, and the test that takes it down right after them: an idle deployment loads the
    machine under every test that runs while it is up (in CI, a second deployment's JVMs took
    over 200 s to start beside it during the start-up chaos test)."""
    def uses_shared(item) -> bool:
        return "shared_deployment" in getattr(item, "fixturenames", ())

    last = [item for item in items if item.get_closest_marker("takes_shared_deployment_down")]
    users = [item for item in items if uses_shared(item) and item not in last]
    rest = [item for item in items if item not in last and item not in users]
    if not users:
        items[:] = rest + last
        return
    at = next(i for i, item in enumerate(items) if uses_shared(item) and item not in last)
    at = len([item for item in items[:at] if item in rest])
    items[:] = rest[:at] + users + last + rest[at:]


@pytest.fixture(scope="session")
def shared_deployment(project_image, e2e_data, tmp_path_factory):
    """One running deployment (started here, its client's session under way) for the tests
    that leave it as they found it: the session answered, a broker killed and healed. Faults a
    test injects go through `kill()`, which records them (`kills`), so another test can tell
    them from the platform's own trouble."""
    with fresh_deployment(project_image, e2e_data,
                          tmp_path_factory.mktemp("shared") / "results") as made:
        made.up()
        yield made


@pytest.fixture
def paced_deployment(project_image, e2e_data, tmp_path):
    """A fresh deployment whose client uploads at most PACED_UPLOAD_ROWS_PER_S rows a second
    in small messages (PACED_SLICE_BYTES): the upload lasts E2E_ROWS / PACED_UPLOAD_ROWS_PER_S s
    or more on any machine, so faults a test injects meanwhile land while it is in flight."""
    settings = {"FLIGHTS_CLIENT_UPLOAD_ROWS_PER_S_MAX": str(PACED_UPLOAD_ROWS_PER_S),
                "FLIGHTS_CLIENT_SLICE_BYTES": str(PACED_SLICE_BYTES)}
    with fresh_deployment(project_image, e2e_data, tmp_path / "results", settings) as made:
        yield made


def assert_results_exact(results_dir: Path, data: SessionData) -> dict:
    """q1.csv ... q4.csv equal the reference row for row (oracle/session_check.py); returns
    summary.json."""
    problems = session_problems(results_dir, data)
    assert not problems, "\n".join(problems)
    return json.loads((results_dir / "summary.json").read_text())
