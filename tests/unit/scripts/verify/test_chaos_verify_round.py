"""run_round's orchestration with a fake deployment: faults go to the fake backend, which heals
(or not) by recording a start and a first heartbeat; the session ends after a few polls."""

import io
import time
from types import SimpleNamespace

import pytest

from scripts.faults.chaos import ACTION_KILL
from scripts.faults.checker_logs import Sighting
from scripts.verify import rounds
from scripts.verify.heal import Start
from scripts.verify.rounds import RoundOptions, run_round


class FakeDeployment:
    """Every service heals 0.01 s after a fault (when `heals`), with a new instance."""

    label = "fake"
    errors = ()

    def __init__(self, tmp_path, heals=True, session_polls=5, outcome="completed"):
        self.results_dirs = {"client-1": tmp_path}
        self.heals = heals
        self.session_polls = session_polls
        self.outcome = outcome
        self.polls = 0
        self.started = self.closed = False
        self._starts: list[Start] = []
        self._sightings: list[Sighting] = []

    # RoundDriver
    def start(self):
        self.started = True

    def backend(self):
        return self

    def session_state(self):
        self.polls += 1
        return self.outcome if self.polls >= self.session_polls else None

    def starts(self):
        return list(self._starts)

    def sightings(self):
        return list(self._sightings)

    def restarts(self):
        return [(start.at, start.service) for start in self._starts]

    def close(self):
        self.closed = True

    # killer.Backend
    def running(self):
        return ["broker-1", "client-1"]

    def _fault(self, name):
        if self.heals:
            now = time.time() + 0.01
            self._starts.append(Start(now, name))
            self._sightings.append(Sighting(now + 0.01, name, f"{name}-{now}", "healthchecker-1"))
        return "pid=1"

    kill = pause = _fault

    def leader(self):
        return None


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(rounds, "POLL_S", 0.01)
    monkeypatch.setattr(rounds, "session_problems", lambda results_dir, data: [])


# The input every client of the fake round reads (session_problems is replaced above).
DATA = SimpleNamespace(directory=None, of=lambda client: f"data of {client}")
OPTIONS = RoundOptions(interval_s=0.02, chaos_duration_s=5.0, pause_ratio=0.5, seed=1,
                       victims="round-robin",
                       faults_min=3, session_timeout_s=30.0, heal_wait_s=0.5)


def test_a_round_whose_faults_all_heal_passes(tmp_path):
    deployment = FakeDeployment(tmp_path)
    result = run_round(deployment, data=DATA, options=OPTIONS, number=1, out=io.StringIO())
    assert result.error is None and result.passed, result
    assert len(result.heals) >= OPTIONS.faults_min and all(h.healed for h in result.heals)
    assert result.restarts == len(result.heals)
    assert result.kinds_hit == {"broker", "client"}
    assert deployment.started and deployment.closed


def test_unhealed_faults_fail_the_round(tmp_path):
    result = run_round(FakeDeployment(tmp_path, heals=False), DATA, OPTIONS, 1, io.StringIO())
    assert result.exact and not result.passed
    assert len(result.unhealed) == len(result.heals) >= OPTIONS.faults_min


def test_a_failed_session_is_the_rounds_error_and_its_faults_are_still_judged(tmp_path):
    deployment = FakeDeployment(tmp_path, session_polls=3, outcome="client-1 exited 1")
    result = run_round(deployment, DATA, OPTIONS, 1, io.StringIO())
    assert "client-1 exited 1" in result.error and not result.passed
    assert result.heals and result.heals[0].fault.action in (ACTION_KILL, "PAUSE")
    assert deployment.closed


def test_a_round_without_faults_fails(tmp_path):
    deployment = FakeDeployment(tmp_path, session_polls=1)
    deployment.running = list
    options = RoundOptions(interval_s=0.02, chaos_duration_s=0.1, seed=1, heal_wait_s=0.5)
    result = run_round(deployment, DATA, options, 1, io.StringIO())
    assert "no fault took" in result.error and not result.passed


def test_each_round_starts_from_an_empty_directory_no_stale_client_state(tmp_path):
    from scripts.verify.campaign import fresh_round_dir

    stale = tmp_path / "round-1" / "client-1" / "state"
    stale.mkdir(parents=True)
    (stale / "session.json").write_text("{}")
    directory = fresh_round_dir(tmp_path, 1)
    assert directory == tmp_path / "round-1" and not directory.exists()


def test_every_clients_problems_are_judged_and_named(tmp_path, monkeypatch):
    """With several clients, a difference in any one of them fails the round, named by it."""
    dirs = {name: tmp_path / name for name in ("client-1", "client-2", "client-3")}
    judged = []

    def problems(results_dir, data):
        judged.append((results_dir.name, data))
        return ["q2: 1 row missing"] if results_dir.name == "client-2" else []

    monkeypatch.setattr(rounds, "session_problems", problems)
    assert rounds.clients_problems(dirs, DATA) == ["client-2: q2: 1 row missing"]
    # Each client judged against its own input.
    assert judged == [(name, f"data of {name}") for name in dirs]
    assert rounds.clients_problems({"client-1": dirs["client-1"]}, DATA) == []
    deployment = FakeDeployment(tmp_path)
    deployment.results_dirs = dirs
    result = run_round(deployment, DATA, OPTIONS, 1, io.StringIO())
    assert result.error is None and not result.exact
    assert result.problems == ["client-2: q2: 1 row missing"]
