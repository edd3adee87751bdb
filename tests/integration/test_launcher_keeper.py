"""run_local's keeper below the health checkers, on real processes: when every checker process
was SIGKILLed it spawns them again from their registered command lines; one live checker, or a
clean exit, and it leaves them alone (scripts/launcher/keeper.py)."""

import pytest

from scripts.deploy.checker_keeper import CheckerKeeper
from scripts.launcher.keeper import LocalCheckers
from scripts.launcher.layout import RunLayout
from scripts.launcher.platform import LocalPlatform

pytestmark = pytest.mark.integration

CHECKERS = ["healthchecker-1", "healthchecker-2", "healthchecker-3"]
SLEEPER = ["-c", "import time; time.sleep(120)"]


@pytest.fixture
def platform(tmp_path):
    layout = RunLayout(tmp_path / "results", tmp_path / "data", keep_broker_data=False)
    layout.prepare()
    platform = LocalPlatform(layout, master="local[1]")
    for name in [*CHECKERS, "broker-1"]:
        platform.register(name, SLEEPER)
        platform.spawn(name)
    yield platform
    platform.stop_all(stop_timeout_s=5.0)


def _live(platform, names):
    return [name for name in names if platform.registry.live_pid(name) is not None]


def test_every_checker_killed_the_keeper_spawns_them_and_nothing_else(platform):
    said = []
    keeper = CheckerKeeper(LocalCheckers(platform), say=said.append)
    platform.registry.kill("healthchecker-1")
    assert keeper.poll_once() == [], "two checkers live: healing the third is theirs"
    old_pids = {name: platform.registry.live_pid(name) for name in CHECKERS[1:]}
    for name in [*CHECKERS[1:], "broker-1"]:
        platform.registry.kill(name)
    assert _live(platform, [*CHECKERS, "broker-1"]) == []
    assert keeper.poll_once() == CHECKERS
    assert _live(platform, CHECKERS) == CHECKERS
    assert all(platform.registry.live_pid(name) != pid for name, pid in old_pids.items())
    assert _live(platform, ["broker-1"]) == [], "the broker is the checkers' to heal"
    assert said == [f"[keeper] no health checker is running: starting {', '.join(CHECKERS)}"]
    assert keeper.poll_once() == []


def test_a_checker_registered_but_not_spawned_yet_is_left_to_the_platform(tmp_path):
    layout = RunLayout(tmp_path / "results", tmp_path / "data", keep_broker_data=False)
    layout.prepare()
    platform = LocalPlatform(layout, master="local[1]")
    platform.register("healthchecker-1", SLEEPER)  # the platform spawns it next
    keeper = CheckerKeeper(LocalCheckers(platform), say=lambda _text: None)
    assert keeper.poll_once() == []
    assert _live(platform, ["healthchecker-1"]) == []


def test_checkers_that_exited_cleanly_are_not_started(platform):
    keeper = CheckerKeeper(LocalCheckers(platform), say=lambda _text: None)
    for name in CHECKERS:
        platform.registry.kill(name)
        platform.registry.mark_done(name)  # what the reaper does on a zero exit status
    assert keeper.poll_once() == []
    assert _live(platform, CHECKERS) == []
