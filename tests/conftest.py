"""Suite-wide wiring: Docker-marked tests run wherever a Docker engine answers."""

import os
import shutil
import subprocess
import sys

import pytest

# Spark's Python workers must use this interpreter (the venv), not whatever `python3` is on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("docker") for item in items):
        return
    if _docker_answers():
        return
    skip = pytest.mark.skip(reason="no Docker engine answers on this machine")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)
