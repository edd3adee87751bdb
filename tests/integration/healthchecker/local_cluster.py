"""Helpers to run health checkers and dummy services as real local processes via a registry."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from healthchecker.local_registry import LocalServiceRegistry, ServiceSpec
from scripts.run_local import free_ports

REPO_ROOT = Path(__file__).resolve().parents[3]
DUMMY_SERVICE = Path(__file__).with_name("dummy_service.py")
SECRET = "integration-secret"

# Small timings keep the tests fast; the ratios are those of the defaults.
FAST_TIMINGS = {
    "--healthcheck-interval-s": "0.25",
    "--healthcheck-misses-max": "3",
    "--answer-timeout-s": "0.3",
    "--coordinator-timeout-s": "0.6",
    "--announce-interval-s": "0.5",
    "--heartbeat-interval-s": "0.2",
    "--heartbeat-timeout-s": "1.0",
    "--restart-grace-s": "1.0",
    "--backoff-base-s": "0.5",
    "--backoff-max-s": "4",
    "--stable-after-s": "10",
}


def wait_until(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"condition not met within {timeout_s}s")


class LocalCluster:
    """N health checkers (ids 1..N) plus dummy services, all in one registry under `root`."""

    def __init__(self, root: Path, checkers: int, timings: dict[str, str] | None = None):
        self.root = root
        self.registry = LocalServiceRegistry(root / "registry")
        self.ports = dict(zip(range(1, checkers + 1), free_ports(checkers), strict=True))
        self.timings = {**FAST_TIMINGS, **(timings or {})}
        self.children = []
        peers = ",".join(f"{i}=127.0.0.1:{port}" for i, port in self.ports.items())
        for node_id, port in self.ports.items():
            argv = [
                sys.executable, "-m", "healthchecker", "--node-id", str(node_id),
                "--peers", peers, "--listen", f"127.0.0.1:{port}", "--secret", SECRET,
                "--backend", "process", "--registry", str(self.registry.directory),
                "--checkpoint-dir", str(root / f"checkpoint-{node_id}"),
            ]
            for flag, value in self.timings.items():
                argv += [flag, value]
            self.registry.register(self._spec(f"healthchecker-{node_id}", argv))

    @property
    def heartbeat_targets(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def _spec(self, name: str, argv: Sequence[str]) -> ServiceSpec:
        return ServiceSpec(
            name=name, argv=tuple(argv), cwd=str(REPO_ROOT), env={"PYTHONPATH": str(REPO_ROOT)},
            log_file=str(self.log_path(name)),
        )

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def log(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def add_dummy(self, name: str, *extra: str) -> None:
        argv = [sys.executable, str(DUMMY_SERVICE), "--name", name,
                "--targets", self.heartbeat_targets, *extra]
        self.registry.register(self._spec(name, argv))

    def start(self, name: str) -> int:
        process = self.registry.spawn(name)
        self.children.append(process)
        return process.pid

    def start_checkers(self) -> None:
        for node_id in self.ports:
            self.start(f"healthchecker-{node_id}")

    def leader_lines(self, node_id: int) -> list[str]:
        lines = self.log(f"healthchecker-{node_id}").splitlines()
        return [line for line in lines if " ROLE " in line]

    def current_role(self, node_id: int) -> str:
        """The last ROLE line's role=..., leader=... of a checker, e.g. 'leader' or 'follower 3'."""
        lines = self.leader_lines(node_id)
        if not lines:
            return ""
        fields = dict(f.split("=", 1) for f in lines[-1].split() if "=" in f)
        return fields["role"] + (f" {fields['leader']}" if "leader" in fields else "")

    def restart_lines(self, node_id: int) -> list[str]:
        return [line for line in self.log(f"healthchecker-{node_id}").splitlines()
                if " RESTART " in line]

    def shutdown(self) -> None:
        """Kill everything the registry knows (children of the checkers included), then reap.
        The checkers go first, so that none of them restarts what follows."""
        names = self.registry.names()
        for name in sorted(names, key=lambda n: not n.startswith("healthchecker-")):
            self.registry.kill(name)
        for process in self.children:
            process.wait(timeout=5)
