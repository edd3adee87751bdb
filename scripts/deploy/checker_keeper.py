"""The one fault the health checkers cannot heal: every one of them down at once.

The checkers restart every killed container, one another included, as long as one of them runs.
A killer faster than their healing (all three within the seconds of start-up before any of them
answers, or on a machine loaded enough that a restart takes longer than the killer's interval)
can leave none running, and then nothing inside the deployment is left to start anything. Docker
will not either: `docker kill` disables a container's restart policy until its next start
(Docker's documented rule), so a `restart:` policy would not help against the killer.

So the command that brings the deployment up and follows it (`make docker-compose-up`:
scripts/compose_follow.py) keeps this watch from the host, outside the deployment's reach: every
`poll_interval_s` it lists the project's health-checker containers and, when none of them runs
and some were killed (exited non-zero; `down` stops them with 0), starts the killed ones and says
so. It never touches a running checker nor any other service: healing stays the checkers' job,
and the first checker back heals the rest.

The same watch fits the local processes of run_local (scripts/launcher/keeper.py): only the
`CheckerSet` differs.
Pure decision: `checkers_to_start(states)`; `CheckerKeeper` only lists, starts and reports.
Thread-safety: a keeper's thread is the only user of its CheckerSet (and its Docker client);
`started` is appended under the GIL and read after `stop()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import docker
import requests
from docker.errors import DockerException
from docker.models.containers import Container

from healthchecker.restarter_docker import DockerRestarter, service_name
from scripts.faults.checker_logs import CHECKER_PREFIX

POLL_INTERVAL_S_DEFAULT = 1.0
STOPPED_STATUSES = frozenset({"exited", "dead"})


@dataclass(frozen=True)
class CheckerState:
    name: str
    status: str  # Docker's: created, running, paused, restarting, exited, dead
    exit_code: int


def checkers_to_start(states: Iterable[CheckerState]) -> list[str]:
    """The killed checkers to start when no checker is up, else none. A checker only `created`
    counts as up: Compose is about to start it."""
    states = list(states)
    if any(state.status not in STOPPED_STATUSES for state in states):
        return []
    return sorted(state.name for state in states if state.exit_code != 0)


@dataclass(frozen=True)
class KeeperStart:
    at: float  # epoch seconds
    names: tuple[str, ...]


class CheckerSet(Protocol):
    """A deployment's health checkers as the keeper sees them."""

    def states(self) -> dict[str, CheckerState]: ...

    def start(self, name: str) -> None: ...


class DockerCheckers:
    """The checker containers of one Compose project (found like the restarter finds services);
    `start` is a plain `docker start`: the keeper never kills anything."""

    def __init__(self, project: str, client: docker.DockerClient | None = None) -> None:
        self._deployment = DockerRestarter(project, client)
        self._containers: dict[str, Container] = {}

    def states(self) -> dict[str, CheckerState]:
        containers = self._deployment.project_containers()
        self._containers = {service_name(c): c for c in containers
                            if service_name(c).startswith(CHECKER_PREFIX)}
        return {name: CheckerState(name, c.status, c.attrs.get("State", {}).get("ExitCode", 0))
                for name, c in self._containers.items()}

    def start(self, name: str) -> None:
        self._containers[name].start()


@dataclass
class CheckerKeeper:
    checkers: CheckerSet
    say: Callable[[str], None] = print
    poll_interval_s: float = POLL_INTERVAL_S_DEFAULT
    errors: tuple[type[Exception], ...] = (DockerException, requests.RequestException)
    started: list[KeeperStart] = field(default_factory=list)
    polls: int = 0  # completed polls, so a caller can wait for one instead of a fixed time

    def __post_init__(self) -> None:
        assert self.poll_interval_s > 0, "the keeper needs a positive poll interval"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checker-keeper", daemon=True)

    def poll_once(self) -> list[str]:
        """Starts the killed checkers if none is up; returns the names it started."""
        names = checkers_to_start(self.checkers.states().values())
        if not names:
            return []
        self.say(f"[keeper] no health checker is running: starting {', '.join(names)}")
        for name in names:
            self.checkers.start(name)
        self.started.append(KeeperStart(time.time(), tuple(names)))
        return names

    def _run(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            try:
                self.poll_once()
            except self.errors as error:
                # An engine that stops answering for a moment (or a container removed by `down`
                # between the listing and the start) is retried at the next poll.
                self.say(f"[keeper] cannot check the health checkers: {error}")
            self.polls += 1

    def start(self) -> CheckerKeeper:
        self._thread.start()
        return self

    def stop(self) -> list[KeeperStart]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.started
