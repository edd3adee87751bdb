"""One Compose deployment driven from Python (the e2e tests, scripts/chaos_verify):
`docker-compose` v1 through subprocess, the rest through the Docker SDK.

Why not testcontainers' `DockerCompose`: it runs `docker compose ...` (the v2 CLI plugin) and
parses `docker compose ps --format json`, which v1 has no notion of. This machine has Docker
Engine 20.10 and only the `docker-compose` 1.29 CLI (Debian package; no registry reachable
here offers the v2 plugin), where `docker compose` fails with "unknown command". So this module
runs `docker-compose -f compose/docker-compose-dev.yaml up -d / down` itself (the same file
and commands `make docker-compose-up` uses) and reads container states, logs and events, and
SIGKILLs containers, with the `docker` SDK.

Each deployment gets a unique project name (COMPOSE_PROJECT_NAME, which also fills the
flights.project label and the health checkers' --project), its own data and results
directories, its own named volumes, removed by `down` (kept by `down_keeping_volumes`), and its
own free host ports for what the Compose file publishes (the status page, the Spark UIs,
Prometheus, the Kafka listeners), so it runs beside a deployment of `make docker-compose-up`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path

import docker
from docker.models.containers import Container

from common.cluster_secret import SECRET_ENV
from scripts.deploy.compose_file import DEV_FILE, IMAGE_DEFAULT
from scripts.deploy.follow import docker_time
from scripts.faults.checker_logs import (
    CHECKER_PREFIX,
    CheckerHistory,
    LogLine,
    Restart,
    RestartDecision,
    checker_history,
    leader_of,
)
from scripts.launcher.ports import free_ports

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
COMPOSE_TIMEOUT_S = 600
POLL_S = 0.5
EVENTS_JOIN_S = 5.0


class DeploymentError(Exception):
    """The deployment did not reach the state a caller waits for (the message carries the
    evidence)."""


def _rendered_numbers(compose_file: Path, kind: str) -> list[int]:
    """The numbers of the `<kind>-<i>:` services a rendering holds, in order."""
    return sorted(int(number) for number in
                  re.findall(rf"^  {kind}-(\d+):$", compose_file.read_text(), re.MULTILINE))


def rendered_brokers(compose_file: Path) -> list[int]:
    """The numbers of the brokers a rendering holds (its `broker-<i>:` services)."""
    return _rendered_numbers(compose_file, "broker")


def rendered_checkers(compose_file: Path) -> list[str]:
    """The health-checker services a rendering holds (`healthchecker-<i>:`), in number order."""
    return [f"healthchecker-{number}"
            for number in _rendered_numbers(compose_file, "healthchecker")]


def rendered_clients(compose_file: Path) -> list[str]:
    """The client services a rendering holds (`client-<i>:`), in number order."""
    return [f"client-{number}" for number in _rendered_numbers(compose_file, "client")]


class ComposeDeployment:
    def __init__(self, data_dir: Path, results_dir: Path, project: str | None = None,
                 compose_file: Path = DEV_FILE, image: str = IMAGE_DEFAULT,
                 project_prefix: str = "flights-e2e",
                 settings: dict[str, str] | None = None) -> None:
        """`settings`: more of the Compose file's variables (FLIGHTS_*, its header)."""
        self.project = project or f"{project_prefix}-{uuid.uuid4().hex[:8]}"
        self.compose_file = compose_file
        # Absolute: Compose reads a relative path as the name of a volume.
        self.data_dir = data_dir.resolve()
        self.results_dir = results_dir.resolve()
        self.image = image
        self.settings = dict(settings or {})
        self.kills: list[tuple[float, str]] = []  # (when, service) of every kill() it made
        # Each deployment its own cluster secret (peer frames, heartbeats, election), handed to
        # docker-compose in its environment, as `make docker-compose-up` does.
        self.cluster_secret = secrets.token_hex(32)
        self.docker = docker.from_env()
        self.brokers = rendered_brokers(compose_file)
        status, master_ui, driver_ui, prometheus, *kafka = free_ports(4 + len(self.brokers))
        self.published_ports = {"FLIGHTS_STATUS_PORT": status,
                                "FLIGHTS_SPARK_MASTER_UI_PORT": master_ui,
                                "FLIGHTS_SPARK_DRIVER_UI_PORT": driver_ui,
                                "FLIGHTS_PROMETHEUS_PORT": prometheus,
                                **{f"FLIGHTS_KAFKA_PORT_{broker}": port
                                   for broker, port in zip(self.brokers, kafka, strict=True)}}

    @property
    def status_url(self) -> str:
        """The live status page, as published on this host."""
        return f"http://127.0.0.1:{self.published_ports['FLIGHTS_STATUS_PORT']}/"

    @property
    def prometheus_url(self) -> str:
        """The deployment's Prometheus (UI and HTTP API), as published on this host."""
        return f"http://127.0.0.1:{self.published_ports['FLIGHTS_PROMETHEUS_PORT']}/"

    @property
    def kafka_bootstrap(self) -> str:
        """Every broker's Kafka listener, as published (and advertised) on this host."""
        return ",".join(f"127.0.0.1:{self.published_ports[f'FLIGHTS_KAFKA_PORT_{broker}']}"
                        for broker in self.brokers)

    # --- docker-compose ---------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "COMPOSE_PROJECT_NAME": self.project,
            "FLIGHTS_IMAGE": self.image,
            "FLIGHTS_DATA_DIR": str(self.data_dir),
            "FLIGHTS_RESULTS_DIR": str(self.results_dir),
            "FLIGHTS_UID": str(os.getuid()),
            "FLIGHTS_GID": str(os.getgid()),
            "FLIGHTS_PUBLISH_HOST": "127.0.0.1",
            SECRET_ENV: self.cluster_secret,
            **{name: str(port) for name, port in self.published_ports.items()},
            **self.settings,
        }

    def compose(self, *args: str, timeout_s: float = COMPOSE_TIMEOUT_S) -> str:
        command = ["docker-compose", "-f", str(self.compose_file), "-p", self.project, *args]
        done = subprocess.run(command, env=self.env(), capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise DeploymentError(f"{' '.join(command)} exited {done.returncode}:\n"
                                  f"{output[-4000:]}")
        return output

    def up(self, *services: str) -> str:
        """Every service, or only `services` (without what they depend on: a test that needs
        a few of them starts no JVM)."""
        self.results_dir.mkdir(parents=True, exist_ok=True)
        return self.compose("up", "-d", *(("--no-deps", *services) if services else ()))

    def down(self) -> str:
        """Stop and remove everything, named volumes included (a test leaves nothing behind)."""
        return self.compose("down", "--volumes", "--remove-orphans")

    def down_keeping_volumes(self) -> str:
        """What `make docker-compose-down` does: the next `up` finds the named volumes' data."""
        return self.compose("down", "--remove-orphans")

    # --- containers -------------------------------------------------------------------------
    def containers(self) -> dict[str, Container]:
        found = self.docker.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})
        return {c.labels[SERVICE_LABEL]: c for c in found}

    def container(self, service: str) -> Container:
        containers = self.containers()
        if service not in containers:
            raise DeploymentError(f"no container for {service}; have {sorted(containers)}")
        return containers[service]

    @property
    def network(self) -> str:
        """The Compose network the services share: `docker run --network` it to run a client
        inside, where the brokers are known by their service names."""
        networks = self.container(f"broker-{self.brokers[0]}").attrs["NetworkSettings"]["Networks"]
        if len(networks) != 1:
            raise DeploymentError(f"broker-{self.brokers[0]} is on {sorted(networks)}, not on "
                                  "one network")
        return next(iter(networks))

    def running(self) -> list[str]:
        return sorted(name for name, c in self.containers().items() if c.status == "running")

    def started_at(self, service: str) -> float:
        return docker_time(self.container(service).attrs["State"]["StartedAt"]).timestamp()

    def kill(self, service: str) -> float:
        """SIGKILL `service`'s container; returns when (epoch seconds), also kept in `kills`."""
        at = time.time()
        self.container(service).kill()
        self.kills.append((at, service))
        return time.time()

    # --- logs -------------------------------------------------------------------------------
    def start_new_session(self, client: str, timeout_s: float = 120.0) -> str:
        """Start `client`'s container again with an empty state directory, so it begins a new
        session (what `make docker-compose-up` does); the new session's client id."""
        state_dir = self.results_dir / client / "state"
        shutil.rmtree(state_dir, ignore_errors=True)
        self.container(client).start()
        id_file = state_dir / "client-id"
        return self.wait_for(f"{client}'s new client id",
                             lambda: id_file.exists() and id_file.read_text().strip(),
                             timeout_s)

    def follow(self, service: str) -> LogFollower:
        """A thread collecting `service`'s new log lines as they are written (until the
        container stops or `stop()`), for a test that must act within milliseconds."""
        return LogFollower(self.container(service)).start()

    def log_lines(self, service: str) -> list[LogLine]:
        """Every line the container wrote, over all its runs, with Docker's timestamps."""
        raw = self.container(service).logs(timestamps=True).decode("utf-8", errors="replace")
        lines = []
        for line in raw.splitlines():
            stamp, _, text = line.partition(" ")
            lines.append(LogLine(docker_time(stamp).timestamp(), text))
        return lines

    def logs_text(self, service: str, tail_lines: int = 60) -> str:
        return "\n".join(f"{dt.datetime.fromtimestamp(line.at):%H:%M:%S.%f} {line.text}"
                         for line in self.log_lines(service)[-tail_lines:])

    def checkers(self) -> list[str]:
        return sorted(name for name in self.containers() if name.startswith(CHECKER_PREFIX))

    def checker_histories(self, running_only: bool = False) -> list[CheckerHistory]:
        """Each health checker's history as its log tells it (scripts/faults/checker_logs.py);
        with `running_only`, of the running checkers only."""
        return [checker_history(checker, self.log_lines(checker)) for checker in self.checkers()
                if not running_only or self.container(checker).status == "running"]

    def restarts(self) -> list[Restart]:
        """Every restart any health checker logged (`RESTARTED service=... action=...`)."""
        return sorted((restart for history in self.checker_histories()
                       for restart in history.restarts), key=lambda restart: restart.at)

    def restart_decisions(self) -> list[tuple[float, str]]:
        """(when, service) of every `RESTART service=...` decision a health checker logged."""
        return sorted((decision.at, decision.service) for decision in self._decisions())

    def restart_causes(self) -> list[tuple[float, str, str]]:
        """(when, service, cause) of every restart decision a health checker logged."""
        return sorted((decision.at, decision.service, decision.cause)
                      for decision in self._decisions())

    def _decisions(self) -> list[RestartDecision]:
        return [decision for history in self.checker_histories()
                for decision in history.decisions]

    def leader(self) -> str | None:
        """The health checker every running checker last named as leader, or None."""
        histories = self.checker_histories(running_only=True)
        return leader_of(histories) if histories else None

    # --- waiting ----------------------------------------------------------------------------
    def wait_for(self, what: str, condition: Callable[[], object], timeout_s: float) -> object:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(POLL_S)
        raise DeploymentError(f"timed out after {timeout_s:g} s waiting for {what}\n"
                              f"{self.diagnostics()}")

    def wait_for_log(self, service: str, pattern: str, timeout_s: float) -> LogLine:
        regex = re.compile(pattern)
        return self.wait_for(
            f"{pattern!r} in {service}'s log",
            lambda: next((line for line in self.log_lines(service) if regex.search(line.text)),
                         None),
            timeout_s)

    def wait_client_done(self, service: str, timeout_s: float) -> None:
        """Until `service` exited 0 (a killed client is restarted by the health checkers and
        resumes; any other exit fails the wait at once, with the evidence)."""

        def done() -> bool:
            container = self.container(service)
            state = container.attrs["State"]
            if state["Status"] == "exited" and state["ExitCode"] not in (0, 137):
                raise DeploymentError(f"{service} exited {state['ExitCode']}\n"
                                      f"{self.diagnostics()}")
            return state["Status"] == "exited" and state["ExitCode"] == 0

        self.wait_for(f"{service} to complete its session", done, timeout_s)

    def diagnostics(self, tail_lines: int = 40) -> str:
        """Each container's state and log tail, runs of lines alike but for their numbers
        folded into one; the brokers and health checkers last, since a CI log keeps the end
        of the output (they tell who led, who was restarted and why)."""
        parts = []
        for name, container in sorted(self.containers().items(), key=_diagnostics_order):
            state = container.attrs["State"]
            lines = [f"{dt.datetime.fromtimestamp(line.at):%H:%M:%S.%f} {line.text}"
                     for line in self.log_lines(name)]
            parts.append(f"===== {name}: {state['Status']} exit={state['ExitCode']} "
                         f"started={state['StartedAt']}\n"
                         + "\n".join(fold_alike(lines)[-tail_lines:]))
        return "\n".join(parts)


class LogFollower:
    """One container's log lines from now on, streamed by a thread (module doc)."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.lines: list[LogLine] = []
        self._changed = threading.Condition()
        self._stream = None
        self._thread = threading.Thread(target=self._read, name="log-follower", daemon=True)

    def start(self) -> LogFollower:
        self._stream = self.container.logs(stream=True, follow=True, timestamps=True,
                                           since=int(time.time()) - 1)
        self._thread.start()
        return self

    def _read(self) -> None:
        pending = b""
        for chunk in self._stream:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            with self._changed:
                for raw in complete:
                    stamp, _, text = raw.decode("utf-8", errors="replace").partition(" ")
                    self.lines.append(LogLine(docker_time(stamp).timestamp(), text))
                self._changed.notify_all()

    def wait_for(self, pattern: str, timeout_s: float) -> LogLine:
        """The first collected line matching `pattern`, as soon as it arrives."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = next((line for line in self.lines if regex.search(line.text)), None)
                if found is not None:
                    return found
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    raise DeploymentError(f"timed out after {timeout_s:g} s waiting for "
                                          f"{pattern!r} in {self.container.name}'s log")
                self._changed.wait(min(left_s, POLL_S))

    def stop(self) -> list[LogLine]:
        """Stop following (the stream ends by itself when the container stops); the lines."""
        if self._stream is not None:
            self._stream.close()
        self._thread.join(EVENTS_JOIN_S)
        with self._changed:
            return list(self.lines)


class EventRecorder:
    """Docker events of one project, recorded by a thread from `start()` to `stop()`."""

    def __init__(self, deployment: ComposeDeployment) -> None:
        self.deployment = deployment
        self.events: list[dict] = []
        self._since = time.time()
        self._stream = None
        self._thread = threading.Thread(target=self._record, name="docker-events", daemon=True)

    def start(self) -> EventRecorder:
        self._stream = self.deployment.docker.events(
            since=int(self._since) - 1, decode=True,
            filters={"label": f"{PROJECT_LABEL}={self.deployment.project}", "type": "container"})
        self._thread.start()
        return self

    def _record(self) -> None:
        for event in self._stream:
            self.events.append(event)

    def stop(self) -> list[dict]:
        self._stream.close()
        self._thread.join(EVENTS_JOIN_S)
        return [e for e in self.events if e.get("timeNano", 0) / 1e9 >= self._since]


_DIGITS = re.compile(r"\d+(\.\d+)?")


def fold_alike(lines: list[str], window: int = 4) -> list[str]:
    """Lines equal but for their numbers (timestamps, counts, delays) to one of the `window`
    lines kept just before them are left out, the run summed up by a count and its last line:
    a retry loop's hundreds of lines (often a cycle of two or three kinds) do not push
    everything else out of a log tail."""
    folded: list[str] = []
    recent: deque[str] = deque(maxlen=window)
    skipped, last_skipped = 0, ""
    for line in lines:
        shape = _DIGITS.sub("#", line)
        if shape in recent:
            skipped, last_skipped = skipped + 1, line
            continue
        if skipped:
            folded.append(f"    ... {skipped} more lines like those above, the last: "
                          f"{last_skipped}")
            skipped = 0
        folded.append(line)
        recent.append(shape)
    if skipped:
        folded.append(f"    ... {skipped} more lines like those above, the last: {last_skipped}")
    return folded


def _diagnostics_order(item) -> tuple[int, str]:
    name = item[0]
    last = name.startswith(("broker", CHECKER_PREFIX))
    return (1 if last else 0, name)
