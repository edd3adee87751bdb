"""The killer's local pause: SIGSTOP to the service's whole process group (a child too, as in a
frozen container), and the process restarter replaces the hung service (kill, then spawn)."""

import subprocess
import sys

import pytest

from healthchecker.local_registry import (
    LocalServiceRegistry,
    ServiceSpec,
    process_is_stopped,
    process_start_ticks,
)
from healthchecker.restarter import ACTION_KILLED_AND_STARTED
from healthchecker.restarter_process import ProcessRestarter
from scripts.faults.backends import KillError, LocalBackend
from tests.integration.healthchecker.local_cluster import wait_until

pytestmark = pytest.mark.integration

# A service with a child, which writes the child's pid where the test can read it.
WITH_CHILD = ("import subprocess, sys, time\n"
              "child = subprocess.Popen(['sleep', '60'])\n"
              "open(sys.argv[1], 'w').write(str(child.pid))\n"
              "time.sleep(60)\n")
READY_TIMEOUT_S = 30.0


def test_a_paused_local_service_stops_with_its_children_and_is_replaced(tmp_path):
    registry = LocalServiceRegistry(tmp_path / "registry")
    child_file = tmp_path / "child.pid"
    registry.register(ServiceSpec("svc", (sys.executable, "-c", WITH_CHILD, str(child_file)),
                                  cwd="/"))
    spawned: list[subprocess.Popen] = [registry.spawn("svc")]
    try:
        wait_until(lambda: child_file.exists() and child_file.read_text(), READY_TIMEOUT_S)
        child = int(child_file.read_text())
        backend = LocalBackend(registry.directory)
        paused_pid = registry.live_pid("svc")
        assert backend.pause("svc") == f"pid={paused_pid} how=SIGSTOP"
        # Signal delivery is asynchronous: the state letter turns T a moment later.
        wait_until(lambda: process_is_stopped(paused_pid) and process_is_stopped(child),
                   READY_TIMEOUT_S)
        assert backend.running() == ["svc"]  # hung, not gone: the chaos loop may hit it again

        outcome = ProcessRestarter(registry).restart("svc", "silent")
        assert outcome.action == ACTION_KILLED_AND_STARTED
        new_pid = registry.live_pid("svc")
        assert new_pid not in (None, paused_pid) and not process_is_stopped(new_pid)
        # The hung instance went with its whole group, the child included.
        wait_until(lambda: process_start_ticks(child) is None, READY_TIMEOUT_S)
    finally:
        registry.kill("svc")
        for process in spawned:
            process.wait(timeout=10)
    with pytest.raises(KillError, match="not running"):
        LocalBackend(registry.directory).pause("svc")
