"""Healing figures with local processes and the default timings (heartbeats every 1 s, timeout
3 s, answer timeout 1 s, ...): three health checkers, two dummy services.

    python -m tests.integration.healthchecker.measure_healing [--rounds 10] [--gap-s 4]

Each round SIGKILLs the dummy `svc`, SIGSTOPs the dummy `hung`, and SIGKILLs the leading
health checker, one after the other, `--gap-s` apart (so each one is hit every ~3 gaps, like a
chaos loop over a whole deployment). For each it measures fault -> restarted (the registry names
a new live process) and fault -> serving again (a checker logged a heartbeat from that new
process), polling every 5 ms. Prints one line per fault, then median and max per kind.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.integration.healthchecker.local_cluster import LocalCluster, wait_until

DEFAULT_TIMINGS = {
    "--healthcheck-interval-s": "1",
    "--healthcheck-misses-max": "3",
    "--answer-timeout-s": "1",
    "--coordinator-timeout-s": "2",
    "--announce-interval-s": "2",
    "--heartbeat-interval-s": "1",
    "--heartbeat-timeout-s": "3",
    "--start-deadline-s": "10",
    "--state-interval-s": "0.5",
    "--backoff-base-s": "1",
    "--backoff-max-s": "30",
    "--stable-after-s": "10",
}
POLL_S = 0.005
HEAL_S_MAX = 30.0


def _measure(cluster: LocalCluster, name: str, fault) -> tuple[float, float]:
    old_pid = cluster.registry.live_pid(name)
    assert old_pid is not None, f"{name} is not running"
    started = time.monotonic()
    fault(old_pid)
    new_pid = wait_until(lambda: cluster.new_pid(name, old_pid), HEAL_S_MAX, POLL_S)
    restarted_s = time.monotonic() - started
    wait_until(lambda: cluster.heard_from(name, new_pid), HEAL_S_MAX, POLL_S)
    return restarted_s, time.monotonic() - started


def _kill(cluster: LocalCluster, name: str):
    return lambda pid: cluster.registry.kill(name)


def _pause(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gap-s", type=float, default=4.0)
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="measure-healing-") as tmp:
        cluster = LocalCluster(Path(tmp), checkers=3, timings=DEFAULT_TIMINGS)
        try:
            for name in ("svc", "hung"):
                cluster.add_dummy(name, "--interval-s", "1")
            cluster.start_checkers()
            pids = {name: cluster.start(name) for name in ("svc", "hung")}
            wait_until(lambda: cluster.leader() is not None, 30)
            for name, pid in pids.items():
                wait_until(lambda name=name, pid=pid: cluster.heard_by_all(name, pid), 30)
            time.sleep(args.gap_s)
            for round_index in range(1, args.rounds + 1):
                leader = wait_until(lambda: cluster.leader(), 30)
                faults = [
                    ("service SIGKILL", "svc", _kill(cluster, "svc")),
                    ("service SIGSTOP", "hung", _pause),
                    ("leader SIGKILL", f"healthchecker-{leader}",
                     _kill(cluster, f"healthchecker-{leader}")),
                ]
                for kind, name, fault in faults:
                    restarted_s, serving_s = _measure(cluster, name, fault)
                    results.setdefault(kind, []).append((restarted_s, serving_s))
                    print(f"round {round_index:2} {kind:<16} {name:<16} restarted "
                          f"{restarted_s:6.2f} s  heartbeat {serving_s:6.2f} s", flush=True)
                    time.sleep(args.gap_s)
        finally:
            cluster.shutdown()
    print()
    print(f"{'fault':<16} {'n':>3}  {'restarted median/max':>22}  {'heartbeat median/max':>22}")
    for kind, values in results.items():
        restarted = [r for r, _ in values]
        serving = [s for _, s in values]
        print(f"{kind:<16} {len(values):>3}  {statistics.median(restarted):9.2f} / "
              f"{max(restarted):5.2f} s  {statistics.median(serving):9.2f} / "
              f"{max(serving):5.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
