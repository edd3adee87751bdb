"""The deployments a fault can hit: a Backend lists the running services of one deployment,
SIGKILLs or pauses one of them and names the health-checker leader.

- `LocalBackend`: the processes of a local service registry (healthchecker/local_registry.py,
  written by the launcher) through their pid files; a pause is SIGSTOP to the service's process
  group (a query service's Spark JVM stops with its driver, as in a container).
- `DockerBackend`: the containers carrying this deployment's project label; a pause is
  `docker kill --signal SIGSTOP`, or `docker pause` (the cgroup freezer) when the container's
  PID 1 is an init (tini) that would be the only process stopped.
- `SpareLastBackend`: another backend minus the last running service of some name prefixes.

Invariants: a service that cannot be hit (unknown, not running, refused by the engine) is a
KillError; an engine that does not answer at all raises its own error (the chaos loop's thread
then ends). `running()` is sorted and includes paused services. The leader is read
through scripts/faults/checker_logs.py and is None unless every running checker agrees.
Threads: none of its own; a backend is used from one thread at a time (the chaos loop's).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from scripts.faults.checker_logs import CHECKER_PREFIX, checker_history, leader_of, untimed_lines

# Programs that run as a container's PID 1 and merely forward signals to the service: SIGSTOP
# stops them, not the service (a stopped process cannot forward anything).
INIT_PROGRAMS = frozenset({"tini", "docker-init", "dumb-init"})
FREEZE_ATTEMPTS = 3
FREEZE_RETRY_S = 0.5


class KillError(Exception):
    """A named service that is unknown or not running, or that the engine refused to signal."""


class Backend(Protocol):
    def running(self) -> list[str]:
        """Names of the services of this deployment that run now (paused ones included),
        sorted."""

    def kill(self, name: str) -> str:
        """SIGKILL `name`; returns what was killed (pid, container id); raises KillError."""

    def pause(self, name: str) -> str:
        """Hang `name` (module doc: SIGSTOP, or the freezer); returns what was paused and how;
        raises KillError."""

    def leader(self) -> str | None:
        """The health checker every running checker names as leader, or None."""


def stop_process_tree(pid: int) -> None:
    """SIGSTOP `pid`, with its whole group when it leads one (a local service and its
    children, as a frozen container would be)."""
    if os.getpgid(pid) == pid:
        os.killpg(pid, signal.SIGSTOP)
    else:
        os.kill(pid, signal.SIGSTOP)


class LocalBackend:
    def __init__(self, registry_dir: Path) -> None:
        from healthchecker.local_registry import LocalServiceRegistry

        self.registry = LocalServiceRegistry(registry_dir)

    def running(self) -> list[str]:
        return [name for name in self.registry.names() if self.registry.live_pid(name) is not None]

    def kill(self, name: str) -> str:
        from healthchecker.local_registry import RegistryError

        try:
            pid = self.registry.kill(name)
        except RegistryError as error:
            raise KillError(str(error)) from error
        if pid is None:
            raise KillError(f"{name} is not running")
        return f"pid={pid}"

    def pause(self, name: str) -> str:
        from healthchecker.local_registry import RegistryError

        try:
            pid = self.registry.live_pid(name)
        except RegistryError as error:
            raise KillError(str(error)) from error
        if pid is None:
            raise KillError(f"{name} is not running")
        try:
            stop_process_tree(pid)
        except ProcessLookupError as error:
            raise KillError(f"{name} (pid {pid}) ended before it could be paused") from error
        return f"pid={pid} how=SIGSTOP"

    def leader(self) -> str | None:
        from healthchecker.local_registry import RegistryError

        histories = []
        for name in self.registry.names():
            if not name.startswith(CHECKER_PREFIX):
                continue
            try:
                if self.registry.live_pid(name) is None:
                    continue
                log_file = self.registry.spec(name).log_file
            except RegistryError:
                return None  # a registry being rewritten: no claim either way
            try:
                text = Path(log_file).read_text(errors="replace")
            except OSError:
                return None  # no log (yet): it has not said whom it follows
            histories.append(checker_history(name, untimed_lines(text)))
        return leader_of(histories) if histories else None


def runs_under_init(container) -> bool:
    """Whether the container's PID 1 is an init that forwards signals (INIT_PROGRAMS, or
    Docker's own `--init`)."""
    if container.attrs.get("HostConfig", {}).get("Init"):
        return True
    entrypoint = container.attrs.get("Config", {}).get("Entrypoint") or []
    if isinstance(entrypoint, str):
        entrypoint = entrypoint.split()
    return bool(entrypoint) and Path(entrypoint[0]).name in INIT_PROGRAMS


class DockerBackend:
    def __init__(self, project: str) -> None:
        from healthchecker.restarter_docker import DockerRestarter

        self._deployment = DockerRestarter(project)

    def _running_containers(self) -> dict:
        from healthchecker.restarter_docker import service_name

        containers = self._deployment.project_containers()
        return {service_name(c): c for c in containers if c.status in ("running", "paused")}

    def _running_container(self, name: str):
        container = self._running_containers().get(name)
        if container is None:
            raise KillError(f"no running container of this deployment for {name!r}")
        return container

    def running(self) -> list[str]:
        return sorted(self._running_containers())

    def kill(self, name: str) -> str:
        from docker.errors import APIError

        container = self._running_container(name)
        try:
            container.kill()  # SIGKILL
        except APIError as error:  # it stopped between the listing and the kill
            raise KillError(f"{name}: {error}") from error
        return f"container={container.short_id}"

    def pause(self, name: str) -> str:
        from docker.errors import APIError

        container = self._running_container(name)
        try:
            if runs_under_init(container):
                self._freeze(container)
                how = "freeze"
            else:
                container.kill(signal="SIGSTOP")
                how = "SIGSTOP"
        except APIError as error:  # stopped meanwhile, already frozen, or will not freeze
            raise KillError(f"{name}: {error}") from error
        return f"container={container.short_id} how={how}"

    def _freeze(self, container) -> None:
        """`docker pause`, retried: on cgroup v1 the freezer gives up ("unable to freeze") when
        a busy container (a JVM's many threads) does not settle at once, and thaws it again; a
        moment later it usually takes. Raises the engine's last APIError."""
        from docker.errors import APIError

        for attempt in range(1, FREEZE_ATTEMPTS + 1):
            try:
                container.pause()
                return
            except APIError as error:
                if not error.is_server_error() or attempt == FREEZE_ATTEMPTS:
                    raise
            time.sleep(FREEZE_RETRY_S)

    def leader(self) -> str | None:
        from docker.errors import APIError

        from healthchecker.restarter_docker import service_name

        histories = []
        for container in self._running_containers().values():
            name = service_name(container)
            if not name.startswith(CHECKER_PREFIX) or container.status != "running":
                continue
            try:
                logs = container.logs()
            except APIError:
                return None  # removed meanwhile: no claim either way
            histories.append(checker_history(name, untimed_lines(logs.decode(errors="replace"))))
        return leader_of(histories) if histories else None


class SpareLastBackend:
    """A backend minus, for each prefix, the last running service whose name starts with it:
    with `healthchecker-`, a chaos loop never kills the last health checker (nothing would be
    left to restart anything)."""

    def __init__(self, backend: Backend, prefixes: Sequence[str]) -> None:
        self.backend = backend
        self.prefixes = tuple(prefixes)

    def running(self) -> list[str]:
        names = self.backend.running()
        spared = set()
        for prefix in self.prefixes:
            group = [name for name in names if name.startswith(prefix)]
            if len(group) == 1:
                spared.update(group)
        return [name for name in names if name not in spared]

    def kill(self, name: str) -> str:
        return self.backend.kill(name)

    def pause(self, name: str) -> str:
        return self.backend.pause(name)

    def leader(self) -> str | None:
        return self.backend.leader()
