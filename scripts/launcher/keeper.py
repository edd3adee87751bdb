"""The keeper below the health checkers (scripts/deploy/checker_keeper.py) for run_local's
processes: a checker whose process is gone without a clean exit (no `.done` mark) was killed; one
registered but never spawned is about to start (like Compose's `created`);
`start` spawns it again from its registered command line, as the platform first did.
Thread-safety: used from the keeper's thread only; the platform's spawn is safe beside the main
thread's (appends under the GIL, files per service)."""

from __future__ import annotations

from healthchecker.local_registry import RegistryError
from scripts.deploy.checker_keeper import CheckerKeeper, CheckerState
from scripts.faults.checker_logs import CHECKER_PREFIX
from scripts.launcher import console
from scripts.launcher.platform import LocalPlatform

KILLED_EXIT = 137  # a checker restarted by its peers is not our child: its status is unknown


class LocalCheckers:
    def __init__(self, platform: LocalPlatform) -> None:
        self.platform = platform

    def states(self) -> dict[str, CheckerState]:
        registry = self.platform.registry
        states = {}
        for name in registry.names():
            if not name.startswith(CHECKER_PREFIX):
                continue
            if registry.read_pid(name) is None:
                # Registered, not spawned yet: the platform is about to start it (as the
                # process restarter's listing, never a stopped one).
                states[name] = CheckerState(name, "created", 0)
            elif registry.live_pid(name) is not None:
                states[name] = CheckerState(name, "running", 0)
            else:
                states[name] = CheckerState(name, "exited",
                                            0 if registry.is_done(name) else KILLED_EXIT)
        return states

    def start(self, name: str) -> None:
        self.platform.spawn(name)


def start_keeper(platform: LocalPlatform) -> CheckerKeeper:
    return CheckerKeeper(LocalCheckers(platform), say=console.say,
                         errors=(RegistryError, OSError)).start()
