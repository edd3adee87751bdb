"""chaos_verify with local processes (run_local's platform: three health checkers with the
process backend, three brokers, the query service on Spark local[2], one client), a fresh run
directory per round. Starts come from a thread that watches the local registry's pid files
(every (re)spawn rewrites them), sightings and restarts from the health checkers' log files."""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path

from healthchecker.local_registry import LocalServiceRegistry, RegistryError
from oracle.session_check import SessionData
from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE
from scripts.faults import backends
from scripts.faults.checker_logs import (
    CHECKER_PREFIX,
    CheckerHistory,
    checker_history,
    local_lines,
)
from scripts.launcher.errors import RunLocalError
from scripts.launcher.layout import RunLayout
from scripts.launcher.platform import LocalPlatform, start_platform
from scripts.launcher.sample_data import InputFiles
from scripts.launcher.sessions import ClientRun, ClientSettings, client_argv, client_outcome
from scripts.verify.heal import Sighting, Start
from scripts.verify.rounds import RoundError

CLIENT = "client-1"
MASTER_DEFAULT = "local[2]"
BROKERS = 3
BATCH_ROWS = 300
PARTITIONS = 4
STOP_TIMEOUT_S = 10.0
SESSION_START_TIMEOUT_S = 60.0
SESSION_STARTED_LINE = re.compile(r"session of")
PID_POLL_S = 0.1
POLL_S = 0.2


class PidWatcher:
    """Records every new (pid, start time) a registry's pid files name, as a Start at the
    time the spawner wrote it. An instance replaced within one poll is missed; the heal of its
    fault is then the next instance's start: later than the truth, never earlier."""

    def __init__(self, registry: LocalServiceRegistry, poll_s: float = PID_POLL_S) -> None:
        self.registry = registry
        self.poll_s = poll_s
        self.starts: list[Start] = []
        self._seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pid-watcher", daemon=True)

    def start(self) -> PidWatcher:
        self.poll()
        self._thread.start()
        return self

    def poll(self) -> None:
        for name in self.registry.names():
            try:
                record = self.registry.read_pid(name)
            except RegistryError:
                continue  # being rewritten; the next poll reads it
            if record is None:
                continue
            key = (record.pid, record.start_ticks)
            if self._seen.get(name) != key:
                self._seen[name] = key
                self.starts.append(Start(record.started_at, name))

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)


class LocalRound:
    errors = (RunLocalError, RegistryError)

    def __init__(self, run_dir: Path, data: SessionData, master: str = MASTER_DEFAULT) -> None:
        self.run_dir = run_dir.resolve()
        self.label = str(self.run_dir)
        self.layout = RunLayout(self.run_dir, self.run_dir / "run" / "broker-data",
                                keep_broker_data=False)
        self.master = master
        inputs = InputFiles(data.directory / FLIGHTS_FILE, data.directory / AIRPORTS_FILE)
        self.client = ClientRun(CLIENT, str(uuid.uuid4()), self.run_dir / CLIENT, inputs)
        self.platform: LocalPlatform | None = None
        self.watcher: PidWatcher | None = None

    @property
    def results_dirs(self) -> dict[str, Path]:
        return {CLIENT: self.client.results_dir}

    def start(self) -> None:
        self.layout.prepare()
        self.platform = LocalPlatform(self.layout, self.master, BROKERS)
        start_platform(self.platform)
        self.platform.wait_for_service()
        settings = ClientSettings(batch_rows=BATCH_ROWS, partitions=PARTITIONS)
        self.platform.register(CLIENT, client_argv(self.client, self.platform, settings))
        self.platform.spawn(CLIENT)
        self._wait_session_started()
        self.watcher = PidWatcher(self.platform.registry).start()

    def _wait_session_started(self) -> None:
        log_path = self.layout.log_path(CLIENT)
        deadline = time.monotonic() + SESSION_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if log_path.exists() and SESSION_STARTED_LINE.search(
                    log_path.read_text(errors="replace")):
                return
            time.sleep(POLL_S)
        raise RoundError(f"{CLIENT} did not start its session in {SESSION_START_TIMEOUT_S:g} s;"
                         f" see {log_path}")

    def backend(self) -> backends.Backend:
        return backends.LocalBackend(self.layout.registry_dir)

    def session_state(self) -> str | None:
        outcome = client_outcome(self.client, self._platform().registry)
        if outcome is None or outcome == "completed":
            return outcome
        return f"{CLIENT}: {outcome} ({self.client.summary.get('error') or 'no error given'})"

    def starts(self) -> list[Start]:
        if self.watcher is None:
            raise RoundError("no pids watched: the round never started")
        return list(self.watcher.starts)

    def _histories(self) -> list[CheckerHistory]:
        reference = time.time()
        return [checker_history(path.stem, local_lines(path.read_text(errors="replace"),
                                                       reference))
                for path in sorted(self.layout.logs_dir.glob(f"{CHECKER_PREFIX}*.log"))]

    def sightings(self) -> list[Sighting]:
        return [sighting for history in self._histories() for sighting in history.sightings]

    def restarts(self) -> list[tuple[float, str]]:
        return sorted((restart.at, restart.service) for history in self._histories()
                      for restart in history.restarts)

    def _platform(self) -> LocalPlatform:
        if self.platform is None:
            raise RoundError("the local platform was never started")
        return self.platform

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.platform is not None:
            self.platform.stop_all(STOP_TIMEOUT_S)
