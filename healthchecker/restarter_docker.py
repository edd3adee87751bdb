"""Compose-mode restarter: starts the stopped container of a service through the Docker Engine API.

A container is this deployment's when it carries `com.docker.compose.project=<project>` or
`flights.project=<project>`, and it may be restarted only if it also carries
`flights.supervised=true`. Anything else is refused with `RefusedServiceError`, even when its
name matches. A service is found by `flights.service=<name>`, `com.docker.compose.service=<name>`
or the container name. A running (hence hung: it is silent) container is SIGKILLed, waited for,
then started; a paused one is unpaused first.
Thread-safety: like the `docker` client it wraps, use from one thread.
"""

from __future__ import annotations

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

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

PROJECT_LABELS = ("com.docker.compose.project", "flights.project")
SERVICE_LABELS = ("flights.service", "com.docker.compose.service")
SUPERVISED_LABEL = "flights.supervised"
KILL_WAIT_S_DEFAULT = 10.0
_HUNG_STATES = ("running", "paused", "restarting")
_STOPPED_STATES = ("exited", "dead")


def service_name(container: Container) -> str:
    labels = container.labels
    for label in SERVICE_LABELS:
        if labels.get(label):
            return labels[label]
    return container.name


def is_supervised(container: Container) -> bool:
    return container.labels.get(SUPERVISED_LABEL, "").lower() == "true"


class DockerRestarter(Restarter):
    def __init__(
        self,
        project: str,
        client: docker.DockerClient | None = None,
        kill_wait_s: float = KILL_WAIT_S_DEFAULT,
    ) -> None:
        assert project, "a project name is required: it fences off other deployments"
        self.project = project
        self.kill_wait_s = kill_wait_s
        self._client = client or docker.from_env()

    def project_containers(self) -> list[Container]:
        """Every container (running or not) that carries this deployment's project label."""
        found: dict[str, Container] = {}
        for label in PROJECT_LABELS:
            filters = {"label": f"{label}={self.project}"}
            # ignore_removed: a container removed between the SDK's listing and its inspect
            # (docker-compose replaces containers while `up` runs) is skipped, not a 404.
            for container in self._client.containers.list(all=True, filters=filters,
                                                          ignore_removed=True):
                found[container.id] = container
        return list(found.values())

    def find(self, name: str) -> list[Container]:
        """This deployment's supervised containers of service `name`; refuses foreign ones."""
        ours = [c for c in self.project_containers() if name in (service_name(c), c.name)]
        if ours:
            unsupervised = [c.name for c in ours if not is_supervised(c)]
            if unsupervised:
                raise RefusedServiceError(f"{unsupervised} lack {SUPERVISED_LABEL}=true")
            return ours
        try:
            stranger = self._client.containers.get(name)
        except NotFound as error:
            raise UnknownServiceError(f"no container for service {name!r}") from error
        raise RefusedServiceError(
            f"container {stranger.name} does not carry this deployment's label "
            f"({' or '.join(PROJECT_LABELS)}={self.project})"
        )

    def restart(self, name: str, cause: str) -> RestartOutcome:
        try:
            containers = self.find(name)
            actions = [self._restart_container(container) for container in containers]
        except (DockerException, requests.RequestException) as error:
            raise RestartFailedError(f"{name}: {error}") from error
        killed = ACTION_KILLED_AND_STARTED in actions
        action = ACTION_KILLED_AND_STARTED if killed else ACTION_STARTED
        return RestartOutcome(name, action, ",".join(c.short_id for c in containers))

    def _restart_container(self, container: Container) -> str:
        container.reload()
        action = ACTION_STARTED
        if container.status in _HUNG_STATES:
            if container.status == "paused":
                container.unpause()
            container.kill()  # SIGKILL
            container.wait(timeout=self.kill_wait_s)
            action = ACTION_KILLED_AND_STARTED
        container.start()
        return action

    def inspect(self, name: str) -> tuple[bool | None, str]:
        """Paused (the cgroup freezer) or any process stopped (SIGSTOP, state T, as `ps`
        shows it through `docker top`) is frozen; a running container otherwise runs."""
        try:
            container = self.find(name)[0]
            container.reload()
            if container.status == "paused":
                return True, f"container {container.short_id} paused"
            if container.status != "running":
                return None, f"container {container.short_id} {container.status}"
            processes = container.top(ps_args="-o pid,stat").get("Processes") or []
        except (DockerException, requests.RequestException) as error:
            raise RestartFailedError(f"{name}: {error}") from error
        stopped = [row[0] for row in processes if len(row) > 1 and row[1].startswith("T")]
        if stopped:
            return True, f"container {container.short_id}: pid {','.join(stopped)} stopped"
        return False, f"container {container.short_id} runs ({len(processes)} processes)"

    def expected_services(self) -> set[str]:
        """Supervised containers that run, or stopped without a clean exit (status 0)."""
        return set(self.listing().expected)

    def listing(self) -> ServiceListing:
        """Expected as above; stopped: those that exited (not 0) or died. A container only
        `created` is not stopped: Compose may be about to start it."""
        try:
            containers = self.project_containers()
        except (DockerException, requests.RequestException) as error:
            raise RestartFailedError(f"cannot list containers: {error}") from error
        expected, stopped = set(), set()
        for container in containers:
            if not is_supervised(container):
                continue
            state = container.attrs.get("State", {})
            if container.status != "exited" or state.get("ExitCode", 0) != 0:
                expected.add(service_name(container))
                if container.status in _STOPPED_STATES:
                    stopped.add(service_name(container))
        return ServiceListing(frozenset(expected), frozenset(stopped))

    def close(self) -> None:
        self._client.close()
