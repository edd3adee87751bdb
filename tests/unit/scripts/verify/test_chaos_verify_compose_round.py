"""ComposeRound with several clients (a rendering of `compose_generator --clients 3`): the round's
session is over only once every client exited 0; a SIGKILLed client (exit 137) is being healed,
not finished; any other exit fails the round, named."""

from types import SimpleNamespace

import pytest

from scripts import compose_generator
from scripts.verify.compose_round import ComposeRound
from scripts.verify.rounds import RoundError


class FakeContainers:
    def __init__(self, compose_file, results_dir):
        self.compose_file = compose_file
        self.results_dir = results_dir
        self.project = "fake"
        self.states = {}

    def container(self, name):
        status, code = self.states.get(name, ("running", 0))
        return SimpleNamespace(attrs={"State": {"Status": status, "ExitCode": code}})


@pytest.fixture
def deployment(tmp_path):
    rendered = tmp_path / "compose.yaml"
    assert compose_generator.main(["--clients", "3", "--out", str(rendered)]) == 0
    return FakeContainers(rendered, tmp_path / "results")


def test_every_rendered_client_is_a_session_with_its_own_results(deployment):
    round_ = ComposeRound(deployment)
    assert round_.clients == ["client-1", "client-2", "client-3"]
    assert round_.results_dirs == {name: deployment.results_dir / name
                                   for name in round_.clients}


def test_the_session_completes_only_when_every_client_exited_0(deployment):
    round_ = ComposeRound(deployment)
    assert round_.session_state() is None
    deployment.states = {"client-1": ("exited", 0), "client-2": ("exited", 0)}
    assert round_.session_state() is None  # client-3 still runs
    deployment.states["client-3"] = ("exited", 137)  # killed: the checkers restart it
    assert round_.session_state() is None
    deployment.states["client-3"] = ("exited", 0)
    assert round_.session_state() == "completed"


def test_a_client_that_failed_fails_the_round_by_name(deployment):
    round_ = ComposeRound(deployment)
    deployment.states = {"client-1": ("exited", 0), "client-2": ("exited", 1)}
    assert round_.session_state() == "client-2 exited 1"


def test_a_rendering_without_clients_is_refused(deployment, tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("services:\n  broker-1:\n    image: x\n")
    deployment.compose_file = empty
    with pytest.raises(RoundError, match="no client service"):
        ComposeRound(deployment)
