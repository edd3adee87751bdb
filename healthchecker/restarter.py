"""The restarter interface: how the leader brings a dead or hung service back.

Backends: `restarter_docker.DockerRestarter` (Compose deployments, Docker Engine API) and
`restarter_process.ProcessRestarter` (local mode, processes described in a local registry).
A restart of a hung service (alive but silent) kills it first; a backend never touches a service
that does not belong to this deployment or is not marked supervised, and says so with
`RefusedServiceError`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

ACTION_STARTED = "started"  # it was not running; started it
ACTION_KILLED_AND_STARTED = "killed_and_started"  # it was running but silent (hung)


class RestartError(Exception):
    """Base of restarter errors."""


class UnknownServiceError(RestartError):
    """The backend knows no service of that name in this deployment."""


class RefusedServiceError(RestartError):
    """The service exists but is not ours to touch (another deployment, or not supervised)."""


class RestartFailedError(RestartError):
    """The backend tried and failed (the engine refused, the command could not start, ...)."""


@dataclass(frozen=True, slots=True)
class ServiceListing:
    expected: frozenset[str]  # supervised services that should be running
    # Of those, the ones the backend knows ran and are not running now (a container that
    # exited or died, a spawned process whose pid is gone; never one only created or
    # registered, which may be about to start): evidence of death that needs no heartbeat.
    stopped: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RestartOutcome:
    name: str
    action: str  # ACTION_STARTED or ACTION_KILLED_AND_STARTED
    detail: str  # backend specific: the new pid, the container id


class Restarter(ABC):
    @abstractmethod
    def restart(self, name: str, cause: str) -> RestartOutcome:
        """Bring `name` back (killing a hung instance first); raises a `RestartError`."""

    @abstractmethod
    def expected_services(self) -> set[str]:
        """Supervised services that should be running (not those that ended on purpose)."""

    def inspect(self, name: str) -> tuple[bool | None, str]:
        """Whether `name`'s process is frozen (SIGSTOPped, paused: True) or runs (False), with
        what was seen; None when this backend cannot tell or nothing runs. Raises a
        `RestartError` when the backend does not answer."""
        return None, "this backend cannot tell"

    def listing(self) -> ServiceListing:
        """The expected services and which of them are known not to run; raises a
        `RestartError` when the backend cannot tell."""
        return ServiceListing(frozenset(self.expected_services()))

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release backend resources."""
