"""The local service registry: how local-mode processes are described, found, started and killed.

`run_local` writes it when it starts the deployment; the health checkers' `ProcessRestarter`
re-spawns from it; the killer's local backend kills from it. One directory per deployment:

    <name>.json   ServiceSpec, written once by whoever registers the service:
                  {"name": "broker-1", "argv": ["python", "-m", ...], "cwd": "/abs/dir",
                   "env": {"EXTRA": "1"}, "log_file": "/abs/broker-1.log", "supervised": true}
    <name>.pid    PidRecord, rewritten by every (re)spawn: {"pid": 4242, "start_ticks": 987654,
                   "started_at": <wall clock s>}
    <name>.done   present when the service ended on purpose (exit status 0); written by the
                  parent that reaped it, removed by the next spawn

`start_ticks` (field 22 of /proc/<pid>/stat) guards against a recycled pid: a pid file only
names a live process when both the pid and its start time match. Each service is spawned in a
new session (its own process group) and killed by group, so its children (a Spark JVM) die with
it, as they would with their container. Every file is written atomically (temp + rename).

A spawner killed between starting a process and writing its pid file (a health checker SIGKILLed
in the middle of a restart) would leave an instance nobody knows of. So every spawned process
carries `FLIGHTS_REGISTRY_SERVICE=<registry dir>/<name>` in its environment: `instances` finds
the session leaders that carry it, `live_pid` falls back on them (and repairs the pid file), and
`kill` kills them all.
Thread-safety: methods are independent file operations; concurrent writers of the same name
must be serialised by the caller. Linux only (/proc).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MARKER_ENV = "FLIGHTS_REGISTRY_SERVICE"
KILL_WAIT_S_DEFAULT = 5.0
_POLL_S = 0.01


class RegistryError(Exception):
    """Base of local registry errors."""


class UnknownLocalServiceError(RegistryError):
    """No `<name>.json` in the registry."""


class CorruptRegistryEntryError(RegistryError):
    """A registry file that does not parse or lacks fields."""


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)
    log_file: str = ""
    supervised: bool = True

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "argv": list(self.argv),
            "cwd": self.cwd,
            "env": dict(self.env),
            "log_file": self.log_file,
            "supervised": self.supervised,
        }

    @classmethod
    def from_json(cls, fields: Mapping) -> ServiceSpec:
        try:
            spec = cls(
                name=str(fields["name"]),
                argv=tuple(str(arg) for arg in fields["argv"]),
                cwd=str(fields["cwd"]),
                env={str(k): str(v) for k, v in fields.get("env", {}).items()},
                log_file=str(fields.get("log_file", "")),
                supervised=bool(fields.get("supervised", True)),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise CorruptRegistryEntryError(f"bad service spec: {error!r}") from error
        if not spec.argv or not NAME_PATTERN.match(spec.name):
            raise CorruptRegistryEntryError(f"bad service spec for {spec.name!r}")
        return spec


@dataclass(frozen=True, slots=True)
class PidRecord:
    pid: int
    start_ticks: int
    started_at: float


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses; fields after the last ')'.
    after_name = stat.rsplit(")", 1)[1].split()
    state, start_ticks = after_name[0], int(after_name[19])
    return None if state in ("Z", "X") else start_ticks


def process_is_stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def kill_process_tree(pid: int, wait_s: float = KILL_WAIT_S_DEFAULT) -> bool:
    """SIGKILL `pid` (its whole group when it leads one); True once it is gone."""
    start_ticks = process_start_ticks(pid)
    if start_ticks is None:
        return True
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process_start_ticks(pid) != start_ticks:
            return True
        time.sleep(_POLL_S)
    return False


class LocalServiceRegistry:
    """A directory of service specs and pid files (format and invariants: module doc)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, name: str, suffix: str) -> Path:
        if not NAME_PATTERN.match(name):
            raise UnknownLocalServiceError(f"invalid service name {name!r}")
        return self.directory / f"{name}{suffix}"

    def _write_atomic(self, path: Path, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        # One temp name per writer: the killer, the checkers and run_local may repair the same
        # pid file at once.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    # --- specs ---------------------------------------------------------------------------------
    def register(self, spec: ServiceSpec) -> None:
        assert NAME_PATTERN.match(spec.name) and spec.argv, f"bad spec {spec!r}"
        self._write_atomic(self._path(spec.name, ".json"), json.dumps(spec.to_json(), indent=1))

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(path.stem for path in self.directory.glob("*.json"))

    def spec(self, name: str) -> ServiceSpec:
        path = self._path(name, ".json")
        try:
            fields = json.loads(path.read_text())
        except FileNotFoundError as error:
            raise UnknownLocalServiceError(f"no service {name!r} in {self.directory}") from error
        except json.JSONDecodeError as error:
            raise CorruptRegistryEntryError(f"{path}: {error}") from error
        return ServiceSpec.from_json(fields)

    # --- pids ----------------------------------------------------------------------------------
    def write_pid(self, name: str, pid: int) -> PidRecord:
        start_ticks = process_start_ticks(pid)
        record = PidRecord(pid, start_ticks if start_ticks is not None else -1, time.time())
        self._write_atomic(
            self._path(name, ".pid"),
            json.dumps(
                {"pid": pid, "start_ticks": record.start_ticks, "started_at": record.started_at}
            ),
        )
        return record

    def read_pid(self, name: str) -> PidRecord | None:
        path = self._path(name, ".pid")
        try:
            fields = json.loads(path.read_text())
            pid, start_ticks = int(fields["pid"]), int(fields["start_ticks"])
            return PidRecord(pid, start_ticks, float(fields["started_at"]))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise CorruptRegistryEntryError(f"{path}: {error!r}") from error

    def live_pid(self, name: str) -> int | None:
        """The pid of the running instance of `name`: the one its pid file names if it lives,
        else one found by its environment marker (the pid file is repaired)."""
        record = self.read_pid(name)
        if record is not None and process_start_ticks(record.pid) == record.start_ticks:
            return record.pid
        found = self.instances(name)
        if not found:
            return None
        self.write_pid(name, found[0])
        return found[0]

    def marker(self, name: str) -> str:
        return f"{self.directory.resolve()}/{name}"

    def instances(self, name: str) -> list[int]:
        """Live session leaders spawned for `name` by this registry (module doc), oldest first."""
        needle = f"{MARKER_ENV}={self.marker(name)}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                pid = int(entry.name)
                if os.getsid(pid) == pid and process_start_ticks(pid) is not None:
                    found.append(pid)
            except (OSError, ValueError):  # gone, or not ours to read
                continue
        return sorted(found, key=lambda pid: process_start_ticks(pid) or 0)

    # --- clean exits ---------------------------------------------------------------------------
    def mark_done(self, name: str) -> None:
        self._write_atomic(self._path(name, ".done"), f"{time.time()}\n")

    def is_done(self, name: str) -> bool:
        return self._path(name, ".done").exists()

    # --- spawning and killing ------------------------------------------------------------------
    def spawn(self, name: str, note: str = "") -> subprocess.Popen:
        """Start `name` from its spec (new session, output appended to its log); the caller
        must reap the returned child (wait on it) and may `mark_done` on a zero exit status."""
        spec = self.spec(name)
        self._path(name, ".done").unlink(missing_ok=True)
        log_path = Path(spec.log_file) if spec.log_file else Path(os.devnull)
        if spec.log_file:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            if note and spec.log_file:
                log_file.write(f"--- {time.strftime('%H:%M:%S')} {note}\n".encode())
                log_file.flush()
            process = subprocess.Popen(
                list(spec.argv),
                cwd=spec.cwd,
                env={**os.environ, **spec.env, MARKER_ENV: self.marker(name)},
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.write_pid(name, process.pid)
        return process

    def kill(self, name: str, wait_s: float = KILL_WAIT_S_DEFAULT) -> int | None:
        """SIGKILL every running instance of `name`; returns the pid of the one its pid file
        names (or of one found by its marker), or None if none runs."""
        pid = self.live_pid(name)
        if pid is None:
            return None
        for victim in dict.fromkeys([pid, *self.instances(name)]):
            if not kill_process_tree(victim, wait_s):
                raise RegistryError(f"{name} (pid {victim}) survived SIGKILL for {wait_s}s")
        return pid
