"""Local registry processes, the process restarter's edges, and the killer's local backend."""

import json
import os
import signal
import subprocess
import sys

import pytest

from healthchecker.local_registry import (
    LocalServiceRegistry,
    ServiceSpec,
    UnknownLocalServiceError,
    process_is_stopped,
    process_start_ticks,
)
from healthchecker.restarter import (
    ACTION_KILLED_AND_STARTED,
    ACTION_STARTED,
    RefusedServiceError,
    ServiceListing,
    UnknownServiceError,
)
from healthchecker.restarter_process import ProcessRestarter
from tests.integration.healthchecker.local_cluster import REPO_ROOT, wait_until

pytestmark = pytest.mark.integration

SPAWNS_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '60'])\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def registry(tmp_path):
    registry = LocalServiceRegistry(tmp_path / "registry")
    spawned: list[subprocess.Popen] = []
    original_spawn = registry.spawn

    def spawn_and_track(name, note=""):
        spawned.append(original_spawn(name, note))
        return spawned[-1]

    registry.spawn = spawn_and_track
    yield registry
    for name in registry.names():
        registry.kill(name)
    for process in spawned:
        process.wait(timeout=5)


def _environment_mapped(pid: int) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        return environ.read(1) != b""


def _register_sleeper(registry, name, **kwargs):
    registry.register(ServiceSpec(name, ("sleep", "60"), cwd="/", **kwargs))


def test_spawn_writes_pid_and_kill_takes_the_whole_group(registry, tmp_path):
    child_pid_file = tmp_path / "child.pid"
    registry.register(ServiceSpec(
        "parent", (sys.executable, "-c", SPAWNS_CHILD, str(child_pid_file)), cwd=str(tmp_path),
        log_file=str(tmp_path / "parent.log"),
    ))
    process = registry.spawn("parent")
    assert registry.live_pid("parent") == process.pid
    child_pid = int(wait_until(lambda: child_pid_file.exists() and child_pid_file.read_text(), 5))
    assert registry.kill("parent") == process.pid
    wait_until(lambda: process_start_ticks(child_pid) is None, 5)
    assert registry.live_pid("parent") is None
    assert registry.kill("parent") is None


def test_recycled_pid_is_not_mistaken_for_the_service(registry):
    _register_sleeper(registry, "svc")
    registry.directory.mkdir(parents=True, exist_ok=True)
    stale = {"pid": os.getpid(), "start_ticks": 1, "started_at": 0.0}
    (registry.directory / "svc.pid").write_text(json.dumps(stale))
    assert registry.live_pid("svc") is None
    assert registry.kill("svc") is None, "must not SIGKILL an unrelated process"


def test_restarter_refuses_unknown_and_unsupervised(registry):
    restarter = ProcessRestarter(registry)
    with pytest.raises(UnknownServiceError):
        restarter.restart("ghost", "test")
    with pytest.raises(UnknownLocalServiceError):
        registry.spec("../etc/passwd")
    _register_sleeper(registry, "free", supervised=False)
    with pytest.raises(RefusedServiceError):
        restarter.restart("free", "test")
    assert restarter.expected_services() == set()


def test_restarter_kills_a_stopped_instance_and_tracks_clean_exits(registry, tmp_path):
    restarter = ProcessRestarter(registry)
    _register_sleeper(registry, "svc")
    assert restarter.listing() == ServiceListing(frozenset({"svc"}), frozenset()), (
        "registered, never spawned: the launcher may be about to start it, not stopped")
    first = restarter.restart("svc", "never started")
    assert first.action == ACTION_STARTED
    old_pid = registry.live_pid("svc")
    os.kill(old_pid, signal.SIGSTOP)
    wait_until(lambda: process_is_stopped(old_pid), 2)
    second = restarter.restart("svc", "hung")
    assert second.action == ACTION_KILLED_AND_STARTED and f"killed {old_pid}" in second.detail
    assert registry.live_pid("svc") not in (None, old_pid)
    assert restarter.listing() == ServiceListing(frozenset({"svc"}), frozenset())
    os.kill(registry.live_pid("svc"), signal.SIGKILL)
    wait_until(lambda: registry.live_pid("svc") is None, 5)
    assert restarter.listing().stopped == {"svc"}, "killed: known not to run, no heartbeat needed"
    restarter.restart("svc", "killed")

    registry.register(ServiceSpec("oneshot", ("true",), cwd="/"))
    restarter.restart("oneshot", "test")
    wait_until(lambda: registry.is_done("oneshot"), 5)
    assert restarter.expected_services() == {"svc"}, "a clean exit is not expected to run"


def _killer(registry, *args, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scripts.killer", "--backend", "local",
         "--registry", str(registry.directory), *args],
        cwd=REPO_ROOT, input=stdin, capture_output=True, text=True, timeout=30,
    )


def test_killer_kills_named_services_only(registry):
    for name in ("a", "b", "c"):
        _register_sleeper(registry, name)
        registry.spawn(name)
    result = _killer(registry, "--services", "a,c")
    assert result.returncode == 0, result.stderr
    assert [line.split()[-2] for line in result.stdout.splitlines()] == ["service=a", "service=c"]
    assert [registry.live_pid(n) is not None for n in ("a", "b", "c")] == [False, True, False]
    missing = _killer(registry, "--services", "a")
    assert missing.returncode == 1 and "not running" in missing.stderr


def test_killer_asks_when_given_nothing(registry):
    for name in ("a", "b"):
        _register_sleeper(registry, name)
        registry.spawn(name)
    result = _killer(registry, stdin="nonsense\n2\n")
    assert result.returncode == 0, result.stderr
    assert "   1  a\n   2  b\n" in result.stdout
    assert "neither a listed number nor a listed name" in result.stdout
    assert registry.live_pid("a") is not None and registry.live_pid("b") is None


def test_killer_chaos_loop_is_bounded_and_respects_excludes(registry):
    for name in ("a", "b", "client-1"):
        _register_sleeper(registry, name)
        registry.spawn(name)
    result = _killer(registry, "--random", "--interval-s", "0.2", "--duration-s", "1.0",
                     "--exclude", "client", "--seed", "7")  # ends on its own (or times out)
    assert result.returncode == 0, result.stderr
    kills = [line for line in result.stdout.splitlines() if " KILL " in line]
    # Bounded by its rounds, not by a clock: at most one a 0.2 s interval of its 1 s.
    rounds = [line for line in result.stdout.splitlines()
              if " KILL " in line or "nothing to kill" in line or "could not" in line]
    assert 1 <= len(rounds) <= int(1.0 // 0.2) + 1, result.stdout
    assert sorted(line.split()[-2] for line in kills) == ["service=a", "service=b"]
    assert "nothing to kill" in result.stdout and "chaos done: 2 kills" in result.stdout
    assert registry.live_pid("client-1") is not None


def test_an_instance_whose_pid_file_was_never_written_is_still_found_and_killed(registry):
    # A health checker killed between starting a process and recording it leaves a stale pid
    # file: the process is found by its environment marker all the same.
    _register_sleeper(registry, "svc")
    first = registry.spawn("svc")
    second = registry.spawn("svc")  # its spawner "died" before writing the pid file:
    registry.write_pid("svc", first.pid)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=5)
    # Popen returns once exec closed the child's descriptors, a moment before the kernel maps
    # its new environment (/proc/<pid>/environ reads empty until then): wait for that.
    wait_until(lambda: _environment_mapped(second.pid), 5)
    assert registry.instances("svc") == [second.pid]
    assert registry.live_pid("svc") == second.pid, "found, and the pid file repaired"
    assert registry.read_pid("svc").pid == second.pid
    third = registry.spawn("svc")  # two instances at once: kill takes both
    assert registry.kill("svc") == third.pid
    wait_until(lambda: registry.instances("svc") == [], 5)
    assert registry.live_pid("svc") is None
