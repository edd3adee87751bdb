"""The keeper below the health checkers: it starts them only when every one is down after a kill,
and never touches a running checker nor another service (scripts/deploy/checker_keeper.py)."""

from dataclasses import dataclass, field

from scripts.deploy.checker_keeper import (
    CheckerKeeper,
    CheckerState,
    DockerCheckers,
    checkers_to_start,
)

PROJECT = "flights-unit"


def _killed(name: str) -> CheckerState:
    return CheckerState(name, "exited", 137)


def test_every_checker_killed_all_are_started():
    states = [_killed("healthchecker-2"), _killed("healthchecker-1"), _killed("healthchecker-3")]
    assert checkers_to_start(states) == ["healthchecker-1", "healthchecker-2", "healthchecker-3"]


def test_one_checker_up_is_enough_it_heals_the_rest():
    for status in ("running", "paused", "restarting", "created"):
        states = [_killed("healthchecker-1"), CheckerState("healthchecker-2", status, 0),
                  _killed("healthchecker-3")]
        assert checkers_to_start(states) == [], status


def test_checkers_stopped_cleanly_stay_stopped():
    # `down` stops them with SIGTERM, which tini turns into 0: a stop is not a fault.
    states = [CheckerState("healthchecker-1", "exited", 0), _killed("healthchecker-2"),
              CheckerState("healthchecker-3", "dead", 0)]
    assert checkers_to_start(states) == ["healthchecker-2"]
    assert checkers_to_start([CheckerState("healthchecker-1", "exited", 0)]) == []


def test_no_checker_container_yet_nothing_to_start():
    assert checkers_to_start([]) == []


@dataclass
class FakeContainer:
    name: str
    status: str
    exit_code: int = 0
    starts: int = 0
    labels: dict = field(default_factory=dict)

    def __post_init__(self):
        self.labels = {"com.docker.compose.project": PROJECT,
                       "com.docker.compose.service": self.name, "flights.supervised": "true"}
        self.id = self.name

    @property
    def attrs(self):
        return {"State": {"ExitCode": self.exit_code}}

    def start(self):
        self.starts += 1
        self.status, self.exit_code = "running", 0


class FakeContainers:
    def __init__(self, containers):
        self.containers = containers

    def list(self, all, filters, ignore_removed):
        label = filters["label"]
        return [c for c in self.containers if label in {f"{k}={v}" for k, v in c.labels.items()}]


class FakeClient:
    def __init__(self, containers):
        self.containers = FakeContainers(containers)


def test_keeper_starts_only_the_killed_checkers_and_says_so():
    checkers = [FakeContainer(f"healthchecker-{i}", "exited", 137) for i in (1, 2, 3)]
    broker = FakeContainer("broker-1", "exited", 137)
    said = []
    client = FakeClient([*checkers, broker])
    keeper = CheckerKeeper(DockerCheckers(PROJECT, client), say=said.append)
    assert keeper.poll_once() == ["healthchecker-1", "healthchecker-2", "healthchecker-3"]
    assert [c.starts for c in checkers] == [1, 1, 1]
    assert broker.starts == 0, "the broker is the checkers' to heal"
    assert said == ["[keeper] no health checker is running: starting "
                    "healthchecker-1, healthchecker-2, healthchecker-3"]
    assert [start.names for start in keeper.started] == [
        ("healthchecker-1", "healthchecker-2", "healthchecker-3")]
    assert keeper.poll_once() == [], "they run now"
    assert [c.starts for c in checkers] == [1, 1, 1]


def test_keeper_leaves_the_healing_to_a_running_checker():
    checkers = [FakeContainer("healthchecker-1", "exited", 137),
                FakeContainer("healthchecker-2", "running")]
    keeper = CheckerKeeper(DockerCheckers(PROJECT, FakeClient(checkers)), say=lambda _text: None)
    assert keeper.poll_once() == []
    assert checkers[0].starts == 0 and keeper.started == []
