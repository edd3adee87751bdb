"""chaos_verify on the Compose deployment: a RoundDriver over one ComposeDeployment (a fresh
project per round). Every client the rendering holds (`--clients N` of compose_generator) runs
its own session (on the shared input, or on its own: clients_data.py); the round's session
ends once all of them completed.
Starts come from the Docker events of the project (recorded from the moment every session is
under way), sightings and restarts from the health checkers' logs (with Docker's
timestamps)."""

from __future__ import annotations

from pathlib import Path

import requests
from docker.errors import DockerException

from scripts.deploy.deployment import (
    SERVICE_LABEL,
    ComposeDeployment,
    DeploymentError,
    EventRecorder,
    rendered_clients,
)
from scripts.faults import backends
from scripts.verify.heal import Sighting, Start
from scripts.verify.rounds import RoundError

START_TIMEOUT_S = 300.0  # `up` returns once the brokers and Spark answer; then the client starts
SESSION_STARTED_LINE = r"session of"
# The client exits 137 when SIGKILLed (by the killer, or by a checker replacing a paused one):
# the health checkers restart it, so that exit is not the session's end.
CLIENT_KILLED_EXIT = 137


class ComposeRound:
    errors = (DeploymentError, DockerException, requests.RequestException)

    def __init__(self, deployment: ComposeDeployment,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.deployment = deployment
        self.label = deployment.project
        self.start_timeout_s = start_timeout_s
        self._events: EventRecorder | None = None
        self.clients = rendered_clients(deployment.compose_file)
        if not self.clients:
            raise RoundError(f"{deployment.compose_file} holds no client service")

    @property
    def results_dirs(self) -> dict[str, Path]:
        return {client: self.deployment.results_dir / client for client in self.clients}

    def start(self) -> None:
        self.deployment.up()
        for client in self.clients:
            self.deployment.wait_for_log(client, SESSION_STARTED_LINE, self.start_timeout_s)
        # The round-robin picker's leader turn needs an agreed leader; so does a fair first
        # fault on the health checkers.
        self.deployment.wait_for("an agreed health-checker leader", self.deployment.leader,
                                 self.start_timeout_s)
        self._events = EventRecorder(self.deployment).start()

    def backend(self) -> backends.Backend:
        return backends.DockerBackend(self.deployment.project)

    def session_state(self) -> str | None:
        """"completed" once every client exited 0; the first client that failed otherwise;
        None while any of them runs or is being healed."""
        running = False
        for client in self.clients:
            state = self.deployment.container(client).attrs["State"]
            if state["Status"] != "exited" or state["ExitCode"] == CLIENT_KILLED_EXIT:
                running = True
            elif state["ExitCode"] != 0:
                return f"{client} exited {state['ExitCode']}"
        return None if running else "completed"

    def starts(self) -> list[Start]:
        if self._events is None:
            raise RoundError("no Docker events recorded: the round never started")
        return [Start(event["timeNano"] / 1e9, event["Actor"]["Attributes"][SERVICE_LABEL])
                for event in list(self._events.events)
                if event.get("Action") == "start"
                and SERVICE_LABEL in event.get("Actor", {}).get("Attributes", {})]

    def sightings(self) -> list[Sighting]:
        return [sighting for history in self.deployment.checker_histories()
                for sighting in history.sightings]

    def restarts(self) -> list[tuple[float, str]]:
        return sorted((restart.at, restart.service)
                      for history in self.deployment.checker_histories()
                      for restart in history.restarts)

    def close(self) -> None:
        if self._events is not None:
            self._events.stop()
