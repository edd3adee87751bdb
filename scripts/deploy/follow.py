"""Following the client containers of a Compose deployment until their sessions end
(`python -m scripts.compose_follow` is its command line): each client's output printed as it
comes (prefixed with its name when there are several), a client restarted by the health
checkers followed again from its new start as long as it comes back within the restart wait,
and the Timings (first result row, each client's end and exit code) for the closing lines.

Invariants: a client counts as finished only when its container exited and did not come back
within the restart wait; `docker_time` reads Docker's RFC 3339 timestamps (nanoseconds cut to
microseconds) as aware datetimes.
Threads: one daemon thread per client; they share only the printing lock and the Timings.
"""


from __future__ import annotations

import datetime as dt
import re
import threading
import time
from dataclasses import dataclass, field

import docker
from docker.models.containers import Container

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
CLIENT_PREFIX = "client-"
RESULT_LINE = re.compile(r"^q[1-4] \| ")  # client/console.py: "q1 | <csv row>"
RESTART_WAIT_S_DEFAULT = 90.0
TIMEOUT_S_DEFAULT = 7200.0
POLL_S = 0.5


class FollowError(Exception):
    """The deployment has no client container, or the Docker engine does not answer."""


@dataclass
class Timings:
    started_at: float
    first_result_at: float | None = None
    finished_at: dict[str, float] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    restarts_seen: dict[str, int] = field(default_factory=dict)


def client_containers(client: docker.DockerClient, project: str) -> dict[str, Container]:
    """This project's client containers, by Compose service name (client-1, client-2, ...)."""
    found = client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"})
    clients = {c.labels.get(SERVICE_LABEL, ""): c for c in found}
    return {name: c for name, c in sorted(clients.items()) if name.startswith(CLIENT_PREFIX)}


def _started_at(container: Container) -> str:
    return container.attrs["State"]["StartedAt"]


def docker_time(text: str) -> dt.datetime:
    """Docker's RFC 3339 time with nanoseconds ('2026-11-22T02:47:49.123456789Z') as UTC."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    micros = int((fraction + "000000")[:6])
    return dt.datetime.fromisoformat(whole).replace(microsecond=micros, tzinfo=dt.UTC)


def _wait_for_restart(container: Container, previous_start: str, wait_s: float) -> bool:
    """True once `container` runs again after `previous_start` (a health-checker restart)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        container.reload()
        if container.status == "running" and _started_at(container) != previous_start:
            return True
        time.sleep(POLL_S)
    return False


class ClientFollower:
    def __init__(self, name: str, container: Container, timings: Timings, prefix: str,
                 print_lock: threading.Lock, restart_wait_s: float) -> None:
        self.name = name
        self.container = container
        self.timings = timings
        self.prefix = prefix
        self.print_lock = print_lock
        self.restart_wait_s = restart_wait_s

    def run(self) -> None:
        self.container.reload()
        # The first time, everything the current run printed; then from each restart on.
        since = docker_time(_started_at(self.container)).timestamp()
        while True:
            start = _started_at(self.container)
            self._print_stream(self.container.logs(stream=True, follow=True, since=since))
            self.container.reload()
            state = self.container.attrs["State"]
            if state["Status"] == "running":  # the stream broke, the client did not
                since = time.time()
                continue
            code = int(state["ExitCode"])
            if code == 0 or not _wait_for_restart(self.container, start, self.restart_wait_s):
                self.timings.exit_codes[self.name] = code
                self.timings.finished_at[self.name] = time.time()
                return
            self.timings.restarts_seen[self.name] = self.timings.restarts_seen.get(self.name, 0) + 1
            self._say(f"--- {self.name} exited {code}; restarted by the health checkers, "
                      "following its resumed session")
            since = docker_time(_started_at(self.container)).timestamp()

    def _print_stream(self, chunks) -> None:
        pending = b""
        for chunk in chunks:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._line(line.decode("utf-8", errors="replace"))
        if pending:
            self._line(pending.decode("utf-8", errors="replace"))

    def _line(self, text: str) -> None:
        if RESULT_LINE.match(text) and self.timings.first_result_at is None:
            self.timings.first_result_at = time.time()
        self._say(text)

    def _say(self, text: str) -> None:
        with self.print_lock:
            print(f"{self.prefix}{text}", flush=True)


def follow(project: str, started_at: float, restart_wait_s: float, timeout_s: float,
           client: docker.DockerClient | None = None) -> Timings:
    client = client or docker.from_env()
    containers = client_containers(client, project)
    if not containers:
        raise FollowError(f"project {project!r} has no {CLIENT_PREFIX}* container")
    timings = Timings(started_at=started_at)
    lock = threading.Lock()
    threads = []
    for name, container in containers.items():
        prefix = f"{name} | " if len(containers) > 1 else ""
        follower = ClientFollower(name, container, timings, prefix, lock, restart_wait_s)
        # Daemon threads: on a timeout the command returns while a stream may still block.
        thread = threading.Thread(target=follower.run, name=f"follow-{name}", daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return timings


def summary_lines(timings: Timings, clients: int) -> list[str]:
    lines = []
    if timings.first_result_at is not None:
        lines.append(f"time to first result: {timings.first_result_at - timings.started_at:.1f} s")
    if len(timings.finished_at) == clients:
        last = max(timings.finished_at.values())
        lines.append(f"total time: {last - timings.started_at:.1f} s")
    for name, code in sorted(timings.exit_codes.items()):
        restarts = timings.restarts_seen.get(name, 0)
        lines.append(f"{name}: exit {code}" + (f" after {restarts} restart(s)" if restarts else ""))
    return lines
