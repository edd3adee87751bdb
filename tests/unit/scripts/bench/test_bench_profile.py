"""The pipeline benchmark's per-process profiles (scripts/bench/profile.py): self time by
function from collapsed stacks, the report's lines, and a py-spy that cannot attach."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from scripts.bench.profile import (
    ProcessProfile,
    SessionProfiler,
    format_summary,
    function_of,
    self_samples,
    summarize,
)

# py-spy's raw format: stacks outermost first, a count last; the first frame names the process
# when --subprocesses is on. `encode` is the leaf at two lines (they add up), `send` once;
# `run` is the leaf of no stack (only inclusive time), and the last stack is the process alone.
_BROKER = 'process 10:"/venv/bin/python -m services.broker"'
_WORKER = 'process 11:"/venv/bin/python -m pyspark.daemon pyspark.worker"'
COLLAPSED = f"""\
{_BROKER};run (services/broker/server.py:40);encode (common/kaska/protocol.py:12) 30
{_BROKER};run (services/broker/server.py:40);encode (common/kaska/protocol.py:15) 20
{_BROKER};run (services/broker/server.py:41);send (<frozen socket>:7) 45

{_BROKER} 5
{_BROKER};{_WORKER};manager (pyspark/daemon.py:9) 10
not a stack line
"""


def test_function_of_drops_the_line_number_only():
    assert function_of("encode (common/kaska/protocol.py:12)") == \
        "encode (common/kaska/protocol.py)"
    assert function_of("<module> (x.py)") == "<module> (x.py)"
    assert function_of(_BROKER) == "<no Python frame>"


def test_self_samples_count_each_leaf_function_and_innermost_process():
    total, leaves, commands = self_samples(COLLAPSED)
    assert total == 110
    assert leaves == {"encode (common/kaska/protocol.py)": 50, "send (<frozen socket>)": 45,
                      "<no Python frame>": 5, "manager (pyspark/daemon.py)": 10}
    assert commands == {"-m services.broker": 100, "-m pyspark.daemon pyspark.worker": 10}


def test_summary_in_seconds_at_the_rate_most_first(tmp_path):
    path = tmp_path / "broker-1.txt"
    path.write_text(COLLAPSED)
    profile = summarize("broker-1", 10, path, rate_hz=50, error=None)
    assert (profile.samples, profile.sampled_s) == (110, 2.2)
    assert profile.self_samples[0] == ("encode (common/kaska/protocol.py)", 50)
    as_json = profile.as_json(top=2)
    assert as_json["self_s_top"] == [["encode (common/kaska/protocol.py)", 1.0],
                                     ["send (<frozen socket>)", 0.9]]
    lines = format_summary("broker-1", as_json, cpu_s=2.5)
    assert lines[0].startswith("  broker-1 (pid 10): 2.5 CPU-s, 2.2 s sampled in Python")
    assert lines[1] == ("    by process: -m services.broker 2.00 s; "
                        "-m pyspark.daemon pyspark.worker 0.20 s")
    assert "1.00 s  45.5 %  encode (common/kaska/protocol.py)" in lines[2]
    assert len(lines) == 4
    # Sampled far beyond the CPU used: threads waiting in the run queue, flagged.
    assert "waiting for a CPU" in format_summary("broker-1", as_json, cpu_s=1.0)[1]


def test_a_process_without_profile_says_why(tmp_path):
    profile = ProcessProfile("client", 7, tmp_path / "client.txt", 0, 100, (),
                             "Error: Permission Denied")
    assert format_summary("client", profile.as_json()) == \
        ["  client (pid 7): no profile: Error: Permission Denied"]


def test_a_py_spy_that_cannot_attach_leaves_its_error_in_the_summary(tmp_path):
    fake = tmp_path / "py-spy"
    fake.write_text(f"#!{sys.executable}\nimport sys\n"
                    "print('Error: Operation not permitted (os error 1)'); sys.exit(1)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    profiler = SessionProfiler(tmp_path / "out", rate_hz=10, py_spy=str(fake))
    with profiler:
        profiler.attach("broker-1", os.getpid())
        # py-spy fails at once when it cannot attach; here the fake must have spoken before the
        # block's end interrupts it.
        log = tmp_path / "out" / "broker-1.py-spy.log"
        deadline = time.monotonic() + 30
        while not log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    profile = profiler.profiles["broker-1"]
    assert profile.samples == 0
    assert profile.error == "Error: Operation not permitted (os error 1)"
    assert Path(profile.path).name == "broker-1.txt"
