"""A broker whose replication loop dies of a bug exits (code 70) instead of living on as a
zombie with its heartbeats going (common/essential_threads.py). The real broker entry point,
with the fault injected into its loop by a wrapper: the loop's 20th round raises IndexError
(the kind soak seed 40046 found), after the broker printed that it listens."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from common.essential_threads import EXIT_ESSENTIAL_THREAD_DIED
from scripts.launcher.local_cluster import REPO, BrokerSpec, broker_argv

pytestmark = pytest.mark.integration

EXIT_TIMEOUT_S = 60.0
FAILING_ROUND = 20  # ~1 s of 50 ms ticks: the broker is listening by then
WRAPPER = """
import pathlib
import sys
from services.broker.replication import node

marker, fail = pathlib.Path(sys.argv.pop(1)), sys.argv.pop(1) == "fail"
rounds = [0]
one_round = node.ReplicationNode._one_round

def counted_round(self):
    rounds[0] += 1
    if rounds[0] == FAILING_ROUND:
        marker.write_text("reached")
        if fail:
            raise IndexError("injected by the test")
    return one_round(self)

node.ReplicationNode._one_round = counted_round
from services.broker.__main__ import main
sys.exit(main(sys.argv[1:]))
""".replace("FAILING_ROUND", str(FAILING_ROUND))


def _broker(tmp_path, fault: str) -> subprocess.Popen:
    """The real broker entry point; its loop's FAILING_ROUND-th round writes `marker` and,
    with fault "fail", raises."""
    return subprocess.Popen(
        # the broker's flags without its `-m services.broker`: the wrapper runs main()
        [sys.executable, "-c", WRAPPER, str(tmp_path / "marker"), fault,
         *broker_argv(BrokerSpec(1, tmp_path / "data"))[2:]],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def test_a_dead_replication_loop_ends_the_broker_with_its_exit_code_and_story(tmp_path):
    proc = _broker(tmp_path, "fail")
    try:
        code = proc.wait(EXIT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = proc.communicate()
    assert "listening on 127.0.0.1:" in stdout, "it died before it served: not the scenario"
    assert (tmp_path / "marker").exists(), "the injected fault never ran"
    assert code == EXIT_ESSENTIAL_THREAD_DIED, (code, stderr[-3000:])
    assert "essential thread kaska-replication-1 died: IndexError: injected by the test" \
        in stderr, stderr[-3000:]
    assert "Traceback" in stderr


def test_the_same_broker_without_the_fault_runs_past_that_round_and_stops_cleanly(tmp_path):
    """The control: the wrapper without the fault leaves a broker that serves until told."""
    proc = _broker(tmp_path, "none")
    try:
        assert "listening on" in proc.stdout.readline()
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while not (tmp_path / "marker").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.05)
        assert proc.poll() is None
    finally:
        proc.terminate()
        assert proc.wait(EXIT_TIMEOUT_S) == 0
