"""Suite-wide wiring: Docker-marked tests run wherever a Docker engine answers; in CI (the CI
variable set, as `.ci/run` runs) they never skip: an engine that does not answer ends the run at
once, before any test, with the reason."""

import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

# Property tests judge what they compute, never how fast: Hypothesis's default 200 ms deadline
# per example and its too-slow health check fail on a loaded machine for no fault of the code.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# Spark's Python workers must use this interpreter (the venv), not whatever `python3` is on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

DOCKER_INFO_TIMEOUT_S = 30
CI_VALUES = ("1", "true", "yes")


def running_in_ci() -> bool:
    """CI=true (or 1, yes), as CI and `.ci/run` set it: nothing may be skipped for want of
    something CI installs or starts."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


SOAK_ENV = "RAFT_SOAK_STEPS"


def _deselect_soaks(config, items) -> None:
    """Soaks are benchmarks (`make soak`), not tests of `make test`: deselected (not skipped)
    unless RAFT_SOAK_STEPS sizes one."""
    if os.environ.get(SOAK_ENV):
        return
    soaks = [item for item in items if item.get_closest_marker("soak")]
    if soaks:
        config.hook.pytest_deselected(items=soaks)
        items[:] = [item for item in items if item not in soaks]


def docker_problem() -> str | None:
    """Why no Docker engine answers here, or None when one does."""
    if shutil.which("docker") is None:
        return "no `docker` command on PATH"
    try:
        probe = subprocess.run(["docker", "info"], capture_output=True, text=True,
                               timeout=DOCKER_INFO_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer within {DOCKER_INFO_TIMEOUT_S} s"
    if probe.returncode != 0:
        return f"`docker info` exited {probe.returncode}: {probe.stderr.strip()[-500:]}"
    return None


def pytest_collection_modifyitems(config, items):
    _deselect_soaks(config, items)
    _refuse_docker_tests_outside_the_suite(items)
    if not any(item.get_closest_marker("docker") for item in items):
        return
    problem = docker_problem()
    if problem is None:
        return
    if running_in_ci():
        pytest.exit(f"CI run, and Docker-marked tests were collected, but no Docker engine "
                    f"answers: {problem}. Start the engine (e.g. `service docker start`) and "
                    f"run again; in CI they never skip.", returncode=3)
    skip = pytest.mark.skip(reason=f"no Docker engine answers on this machine: {problem}")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)


# The Docker suite's tests share fixed host ports, one image build and one shared deployment:
# under pytest-xdist (`make test` runs `pytest -n TEST_WORKERS`, whose default distribution is
# "load") they are one unit of work, run by one worker in their order while the other workers
# take the rest one test at a time. xdist's own `--dist loadgroup` would say this with a mark,
# but with pytest 9.2 it no longer groups (pytest-dev/pytest-xdist#1386).
DOCKER_SUITE_PREFIX = "tests/e2e/"


def _refuse_docker_tests_outside_the_suite(items) -> None:
    outside = [item.nodeid for item in items if item.get_closest_marker("docker")
               and not item.nodeid.startswith(DOCKER_SUITE_PREFIX)]
    if outside:
        raise pytest.UsageError(f"Docker-marked tests outside {DOCKER_SUITE_PREFIX} would run "
                                f"beside the Docker suite under xdist: {outside}")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class DockerSuiteInOneWorker(LoadScopeScheduling):
        """Every other test is a unit of its own; the largest unit, the Docker suite, is
        handed out first (xdist's --loadscope-reorder), so it never waits for the rest."""

        def _split_scope(self, nodeid: str) -> str:
            return DOCKER_SUITE_PREFIX if nodeid.startswith(DOCKER_SUITE_PREFIX) else nodeid

    return DockerSuiteInOneWorker(config, log)
