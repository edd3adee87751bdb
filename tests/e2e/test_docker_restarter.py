"""DockerRestarter, the killer's docker backend and the checker keeper against real containers
(testcontainers).

Uses the project's locally built base image (no registry is reachable), which the project
image's build (the e2e `project_image` fixture) makes. Every container carries a project label
unique to the test run, so nothing else on the engine can be touched.
"""

import subprocess
import time
import uuid

import docker
import pytest
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

from healthchecker.restarter import (
    ACTION_KILLED_AND_STARTED,
    ACTION_STARTED,
    RefusedServiceError,
    ServiceListing,
    UnknownServiceError,
)
from healthchecker.restarter_docker import DockerRestarter
from scripts.deploy.checker_keeper import CheckerKeeper, DockerCheckers
from scripts.faults.backends import DockerBackend, KillError

pytestmark = pytest.mark.docker

IMAGE = "flights-optimizer-base:bookworm"
STOPPED_TIMEOUT_S = 10.0
# The Ryuk reaper image would have to be pulled from a registry; containers are removed here.
testcontainers_config.ryuk_disabled = True


@pytest.fixture(scope="module")
def image(project_image):
    """The base image: the project image's build (tests/e2e/conftest.py, one build at a time)
    makes it first."""
    subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=True)
    return IMAGE


@pytest.fixture
def project():
    return f"flights-e2e-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def containers(image):
    started: list[DockerContainer] = []

    def start(labels: dict[str, str], command: str = "sleep infinity", name: str | None = None):
        container = DockerContainer(image).with_command(command).with_kwargs(labels=labels)
        if name:
            container = container.with_name(name)
        started.append(container.start())
        return container.get_wrapped_container()

    yield start
    for container in started:
        container.stop()


def _labels(project: str, service: str, supervised: bool = True) -> dict[str, str]:
    labels = {"flights.project": project, "flights.service": service}
    if supervised:
        labels["flights.supervised"] = "true"
    return labels


def _status(container) -> str:
    container.reload()
    return container.status


def _wait_exited(container, timeout_s: float = 20) -> None:
    container.wait(timeout=timeout_s)
    assert _status(container) == "exited"


def test_starts_a_killed_container_and_expects_it(project, containers):
    container = containers(_labels(project, "svc-a"))
    restarter = DockerRestarter(project)
    assert restarter.listing() == ServiceListing(frozenset({"svc-a"}), frozenset())
    container.kill()
    _wait_exited(container)
    assert container.attrs["State"]["ExitCode"] == 137
    assert restarter.expected_services() == {"svc-a"}
    assert restarter.listing().stopped == {"svc-a"}, "exited: known dead without a heartbeat"
    outcome = restarter.restart("svc-a", "no heartbeat for 3.1s")
    assert outcome.action == ACTION_STARTED and outcome.detail == container.short_id
    assert _status(container) == "running"


def test_kills_and_starts_a_hung_or_paused_container(project, containers):
    container = containers(_labels(project, "svc-hung"))
    restarter = DockerRestarter(project)
    started_at = container.attrs["State"]["StartedAt"]
    assert restarter.restart("svc-hung", "silent").action == ACTION_KILLED_AND_STARTED
    container.reload()
    assert container.status == "running" and container.attrs["State"]["StartedAt"] != started_at
    container.pause()
    assert restarter.restart("svc-hung", "silent while paused").action == ACTION_KILLED_AND_STARTED
    assert _status(container) == "running"


def test_refuses_containers_without_the_labels(project, containers):
    stranger_name = f"{project}-stranger"
    stranger = containers({}, name=stranger_name)
    unsupervised = containers(_labels(project, "svc-free", supervised=False))
    foreign = containers(_labels(f"{project}-other", "svc-b"))
    for container in (stranger, unsupervised, foreign):
        container.kill()
        _wait_exited(container)
    restarter = DockerRestarter(project)
    with pytest.raises(RefusedServiceError, match="does not carry this deployment's label"):
        restarter.restart(stranger_name, "test")
    with pytest.raises(RefusedServiceError, match="flights.supervised"):
        restarter.restart("svc-free", "test")
    with pytest.raises(UnknownServiceError):
        restarter.restart("svc-b", "test")  # another deployment's service is invisible
    assert [_status(c) for c in (stranger, unsupervised, foreign)] == ["exited"] * 3
    assert restarter.expected_services() == set()


def test_a_clean_exit_is_not_expected(project, containers):
    done = containers(_labels(project, "client-1"), command="true")
    _wait_exited(done)
    assert DockerRestarter(project).expected_services() == set()


def test_killer_docker_backend_sees_only_this_deployment(project, containers):
    ours = containers(_labels(project, "broker-1", supervised=False))
    containers(_labels(f"{project}-other", "broker-2"))
    backend = DockerBackend(project)
    assert backend.running() == ["broker-1"]
    with pytest.raises(KillError):
        backend.kill("broker-2")
    assert backend.kill("broker-1").startswith("container=")
    _wait_exited(ours)
    assert ours.attrs["State"]["ExitCode"] == 137


def _main_process_state(container) -> str:
    """The state letter of the container's PID 1 as the host sees it (T: stopped)."""
    container.reload()
    host_pid = container.attrs["State"]["Pid"]
    with open(f"/proc/{host_pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_sigstopped_container_looks_running_and_the_restarter_replaces_it(project, containers):
    """PID 1 is the service itself here: the killer SIGSTOPs it and Docker still says running."""
    container = containers(_labels(project, "svc-stopped"))
    assert DockerBackend(project).pause("svc-stopped").endswith("how=SIGSTOP")
    assert _status(container) == "running"
    # Signal delivery is asynchronous: the state letter turns T a moment later.
    deadline = time.monotonic() + STOPPED_TIMEOUT_S
    while _main_process_state(container) != "T" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _main_process_state(container) == "T"
    outcome = DockerRestarter(project).restart("svc-stopped", "silent")
    assert outcome.action == ACTION_KILLED_AND_STARTED
    assert _status(container) == "running" and _main_process_state(container) != "T"


def test_a_container_under_docker_init_is_frozen_then_replaced(project, image):
    """Under an init (the project image runs tini), SIGSTOP would stop only the init while its
    child went on serving: the killer freezes the whole container instead."""
    client = docker.from_env()
    container = client.containers.run(image, "sleep infinity", detach=True, init=True,
                                      labels=_labels(project, "svc-frozen"))
    try:
        assert DockerBackend(project).pause("svc-frozen").endswith("how=freeze")
        assert _status(container) == "paused"
        outcome = DockerRestarter(project).restart("svc-frozen", "silent while frozen")
        assert outcome.action == ACTION_KILLED_AND_STARTED
        assert _status(container) == "running"
    finally:
        container.remove(force=True)


def _wait_polls(keeper: CheckerKeeper, polls: int, timeout_s: float = 30.0) -> None:
    target = keeper.polls + polls
    deadline = time.monotonic() + timeout_s
    while keeper.polls < target:
        assert time.monotonic() < deadline, f"the keeper made {keeper.polls} of {target} polls"
        time.sleep(0.05)


def test_keeper_starts_the_checkers_only_when_every_one_was_killed(project, containers):
    checkers = [containers(_labels(project, f"healthchecker-{i}")) for i in (1, 2, 3)]
    broker = containers(_labels(project, "broker-1"))
    keeper = CheckerKeeper(DockerCheckers(project), say=lambda _text: None,
                           poll_interval_s=0.1).start()
    try:
        checkers[0].kill()
        _wait_exited(checkers[0])
        _wait_polls(keeper, 3)
        assert keeper.started == [] and _status(checkers[0]) == "exited", \
            "two checkers run: healing checker-1 is theirs"
        for container in (*checkers[1:], broker):
            container.kill()
            _wait_exited(container)
        deadline = time.monotonic() + STOPPED_TIMEOUT_S
        while [c for c in checkers if _status(c) != "running"]:
            assert time.monotonic() < deadline, [_status(c) for c in checkers]
            time.sleep(0.1)
        _wait_polls(keeper, 3)
    finally:
        started = keeper.stop()
    assert [s.names for s in started] == [("healthchecker-1", "healthchecker-2",
                                           "healthchecker-3")]
    assert _status(broker) == "exited", "the broker is left to the checkers the keeper started"


def test_inspect_tells_a_frozen_container_from_a_running_one(project, containers):
    container = containers(_labels(project, "svc-a"))
    restarter = DockerRestarter(project)
    frozen, detail = restarter.inspect("svc-a")
    assert frozen is False and "runs" in detail
    container.kill(signal="SIGSTOP")  # `sleep` is PID 1 here: the process itself stops
    frozen, detail = restarter.inspect("svc-a")
    assert frozen is True and "stopped" in detail, detail
    container.kill(signal="SIGCONT")
    assert restarter.inspect("svc-a")[0] is False
    container.pause()
    assert restarter.inspect("svc-a") == (True, f"container {container.short_id} paused")
    container.unpause()
    container.kill()
    _wait_exited(container)
    assert restarter.inspect("svc-a")[0] is None, "nothing runs: cannot be slow"
