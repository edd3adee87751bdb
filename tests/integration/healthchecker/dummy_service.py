"""A tiny supervised service for tests: heartbeats, then idles until SIGTERM (or dies on cue).

    python dummy_service.py --name svc --targets 127.0.0.1:9001,127.0.0.1:9002
        --secret-file FILE [--interval-s 0.2] [--exit-after-s 0.5 --exit-code 3] [--start-delay-s 2]

`--start-delay-s` sleeps before the first heartbeat: a slow starter (a JVM on a busy machine).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from common.cluster_secret import read_secret_file
from common.heartbeat import HeartbeatSender, parse_targets


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
    time.sleep(args.start_delay_s)
    targets = parse_targets(args.targets)
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
