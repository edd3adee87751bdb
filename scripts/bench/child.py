"""The benchmarks' child processes and what one timed round costs: `Child` starts a process that
prints `... listening on host:port` once it serves (a broker, a ceiling helper) and stops it;
`measured` gives a round's wall seconds and the serving process's CPU seconds.

Invariants: a Child that did not print its listening line within READY_TIMEOUT_S is stopped and
raises RuntimeError with its log's tail; `stop` sends SIGTERM, then SIGKILL after 10 s. Every
child runs from the repository root with it on PYTHONPATH.
Threads: none; the caller's.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from common.address import parse_host_port

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0  # a module setting: the journal benchmark raises it for slow replays


class Child:
    """A child process that prints `... listening on host:port` once it serves."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=log,
                                         env={**os.environ, "PYTHONPATH": str(REPO)})
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            ready = selector.select(READY_TIMEOUT_S)
        line = self.proc.stdout.readline().decode() if ready else ""
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"{command[2:4]} did not start: {log_path.read_text()[-2000:]}")
        self.address = parse_host_port(line.strip().rsplit(" ", 1)[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (clock-tick resolution, ~10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(server: Child | list[Child], run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, the server processes' CPU seconds together) of one round. CPU time
    hardly depends on what else the machine runs, so it tells the brokers' cost apart from
    the noise."""
    pids = [child.proc.pid for child in (server if isinstance(server, list) else [server])]
    before = sum(cpu_s(pid) for pid in pids)
    wall_s = timed(run)
    return wall_s, sum(cpu_s(pid) for pid in pids) - before
