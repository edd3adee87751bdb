"""Follows the client containers of a Compose deployment until their sessions end.

    python -m scripts.compose_follow [--project flights-optimizer] [--started-at EPOCH_S]

Prints each client's output as it comes (prefixed with its name when there are several). A
client killed mid-session is restarted by the health checkers and resumes its session; its
output is followed again from the new start, for as long as it comes back within
`--restart-wait-s`. Ends when every client has exited: status 0 only if every one exited 0
(its results are then in RESULTS_DIR/client-<i>/). The closing lines give, from
`--started-at` (default: when this command started), the time to the first result row any
client printed and the time until the last client finished.

Thread-safety: one thread per client; they share only the printing lock and the timings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import docker
import requests
from docker.errors import DockerException, NotFound

from scripts.deploy.checker_keeper import CheckerKeeper, DockerCheckers
from scripts.deploy.follow import (
    RESTART_WAIT_S_DEFAULT,
    TIMEOUT_S_DEFAULT,
    FollowError,
    client_containers,
    follow,
    summary_lines,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.compose_follow", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", default=os.environ.get("COMPOSE_PROJECT_NAME",
                                                            "flights-optimizer"))
    parser.add_argument("--started-at", type=float, default=None,
                        help="epoch seconds the timings count from (default: now)")
    parser.add_argument("--restart-wait-s", type=float, default=RESTART_WAIT_S_DEFAULT)
    parser.add_argument("--timeout-s", type=float, default=TIMEOUT_S_DEFAULT)
    parser.add_argument("--no-keeper", dest="keeper", action="store_false",
                        help="do not start the health checkers again when every one is down")
    return parser


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started_at = args.started_at if args.started_at is not None else time.time()
    try:
        client = docker.from_env()
        clients = len(client_containers(client, args.project))
        keeper = (CheckerKeeper(DockerCheckers(args.project), say=_say).start()
                  if args.keeper else None)
        try:
            timings = follow(args.project, started_at, args.restart_wait_s, args.timeout_s,
                             client)
        finally:
            if keeper is not None:
                keeper.stop()
    except (FollowError, DockerException, NotFound, requests.RequestException) as error:
        print(f"compose_follow: {error}", file=sys.stderr)
        return 1
    for line in summary_lines(timings, clients):
        print(line, flush=True)
    if len(timings.exit_codes) < clients:
        print(f"compose_follow: gave up after {args.timeout_s:g} s", file=sys.stderr)
        return 1
    return 0 if all(code == 0 for code in timings.exit_codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
