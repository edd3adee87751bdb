"""Local-mode restarter: re-spawns a service with its original command line from the registry.

A hung instance (alive but silent, e.g. SIGSTOPped) is SIGKILLed, with its process group, before
the new one starts. Every child spawned here is reaped by a small daemon thread, which marks the
service done when it exits with status 0 (so no health checker restarts a finished service).
Thread-safety: `restart` may be called from one thread at a time (the node's restarter thread).
"""

from __future__ import annotations

import logging
import subprocess
import threading

from healthchecker.local_registry import (
    KILL_WAIT_S_DEFAULT,
    LocalServiceRegistry,
    RegistryError,
    UnknownLocalServiceError,
    process_is_stopped,
)
from healthchecker.restarter import (
    ACTION_KILLED_AND_STARTED,
    ACTION_STARTED,
    RefusedServiceError,
    Restarter,
    RestartFailedError,
    RestartOutcome,
    ServiceListing,
    UnknownServiceError,
)

log = logging.getLogger(__name__)


class ProcessRestarter(Restarter):
    def __init__(self, registry: LocalServiceRegistry, kill_wait_s: float = KILL_WAIT_S_DEFAULT):
        self.registry = registry
        self.kill_wait_s = kill_wait_s

    def restart(self, name: str, cause: str) -> RestartOutcome:
        try:
            spec = self.registry.spec(name)
        except UnknownLocalServiceError as error:
            raise UnknownServiceError(str(error)) from error
        except RegistryError as error:
            raise RestartFailedError(str(error)) from error
        if not spec.supervised:
            raise RefusedServiceError(f"{name} is registered with supervised=false")
        try:
            killed_pid = self.registry.kill(name, self.kill_wait_s)
            process = self.registry.spawn(name, note=f"restarted by health checker: {cause}")
        except (RegistryError, OSError) as error:
            raise RestartFailedError(f"{name}: {error}") from error
        threading.Thread(
            target=self._reap, args=(name, process), name=f"reap-{name}", daemon=True
        ).start()
        action = ACTION_STARTED if killed_pid is None else ACTION_KILLED_AND_STARTED
        detail = f"pid {process.pid}" + ("" if killed_pid is None else f" (killed {killed_pid})")
        return RestartOutcome(name, action, detail)

    def inspect(self, name: str) -> tuple[bool | None, str]:
        try:
            pid = self.registry.live_pid(name)
        except (RegistryError, OSError) as error:
            raise RestartFailedError(f"{name}: {error}") from error
        if pid is None:
            return None, "no live process"
        if process_is_stopped(pid):
            return True, f"pid {pid} stopped (SIGSTOP)"
        return False, f"pid {pid} runs"

    def expected_services(self) -> set[str]:
        return set(self.listing().expected)

    def listing(self) -> ServiceListing:
        """Expected: supervised and not done; stopped: of those, the ones spawned (a pid
        file) with no live pid. Registered but never spawned is not stopped: the launcher
        may be about to start it."""
        expected, stopped = set(), set()
        for name in self.registry.names():
            try:
                if self.registry.spec(name).supervised and not self.registry.is_done(name):
                    expected.add(name)
                    if (self.registry.read_pid(name) is not None
                            and self.registry.live_pid(name) is None):
                        stopped.add(name)
            except RegistryError as error:
                log.warning("skipping registry entry %s: %s", name, error)
        return ServiceListing(frozenset(expected), frozenset(stopped))

    def _reap(self, name: str, process: subprocess.Popen) -> None:
        status = process.wait()
        if status == 0 and self.registry.live_pid(name) is None:
            self.registry.mark_done(name)
        log.info("%s (pid %d) exited with status %d", name, process.pid, status)
