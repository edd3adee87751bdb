"""A tiny supervised service for tests: heartbeats, then idles until SIGTERM (or dies on cue).

    python dummy_service.py --name svc --targets 127.0.0.1:9001,127.0.0.1:9002
        --secret-file FILE [--interval-s 0.2] [--exit-after-s 0.5 --exit-code 3] [--start-delay-s 2]

`--start-delay-s` sleeps before the first heartbeat: a slow starter (a JVM on a busy machine).
SIGUSR1 makes it busy without end: the main thread spins holding the GIL (the switch interval
raised so it is never asked to let go), so its heartbeat thread starves while the process runs
(state R) with its connection open -- a service too slow to beat, not a frozen one.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from common.address import parse_host_ports
from common.cluster_secret import read_secret_file
from common.heartbeat import HeartbeatSender


def _busy_forever(_signum, _frame) -> None:
    sys.setswitchinterval(1e6)
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--targets", required=True)
    parser.add_argument("--secret-file", type=Path, required=True)
    parser.add_argument("--interval-s", type=float, default=0.2)
    parser.add_argument("--exit-after-s", type=float, help="die on its own after this long")
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--start-delay-s", type=float, default=0.0)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGUSR1, _busy_forever)
    time.sleep(args.start_delay_s)
    targets = parse_host_ports(args.targets)
    sender = HeartbeatSender(args.name, targets=targets, interval_s=args.interval_s,
                             secret=read_secret_file(args.secret_file)).start()
    print(f"{args.name} up", flush=True)
    if stop.wait(args.exit_after_s):
        sender.stop(say_goodbye=True)
        return 0
    sender.stop(say_goodbye=False)  # a crash says no goodbye
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
