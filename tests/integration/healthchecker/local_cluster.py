"""Helpers to run health checkers and dummy services as real local processes via a registry."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from healthchecker.local_registry import LocalServiceRegistry, ServiceSpec, kill_process_tree
from scripts.launcher.ports import free_ports

REPO_ROOT = Path(__file__).resolve().parents[3]
DUMMY_SERVICE = Path(__file__).with_name("dummy_service.py")
SECRET = "integration-secret"
MARKER = "marker"  # a dummy service killed to prove a checker ticked (`evaluated_after_now`)

# Small timings keep the tests fast; the ratios are those of the defaults. The start deadline
# is generous: a Python service on a busy 2-core machine may take seconds to import.
FAST_TIMINGS = {
    "--healthcheck-interval-s": "0.25",
    "--healthcheck-misses-max": "3",
    "--answer-timeout-s": "0.3",
    "--coordinator-timeout-s": "0.6",
    "--announce-interval-s": "0.5",
    "--heartbeat-interval-s": "0.2",
    "--heartbeat-timeout-s": "1.0",
    "--hung-timeout-s": "6",
    "--start-deadline-s": "8",
    "--state-interval-s": "0.25",
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

    def __init__(self, root: Path, checkers: int, timings: dict[str, str] | None = None,
                 metrics: bool = False):
        self.root = root
        self.registry = LocalServiceRegistry(root / "registry")
        ports = free_ports(checkers * (2 if metrics else 1))  # one call: distinct ports
        self.ports = dict(zip(range(1, checkers + 1), ports[:checkers], strict=True))
        # node id -> its --metrics-listen port (none without `metrics`)
        self.metrics_ports = dict(zip(self.ports, ports[checkers:], strict=False))
        self.timings = {**FAST_TIMINGS, **(timings or {})}
        self.children = []
        peers = ",".join(f"{i}@127.0.0.1:{port}" for i, port in self.ports.items())
        # Checkers and dummies read the cluster secret from a file, as run_local's do.
        self.secret_file = root / "secret"
        self.secret_file.parent.mkdir(parents=True, exist_ok=True)
        self.secret_file.write_text(SECRET)
        self.secret_file.chmod(0o600)
        for node_id, port in self.ports.items():
            argv = [
                sys.executable, "-m", "healthchecker", "--node-id", str(node_id),
                "--peers", peers, "--listen", f"127.0.0.1:{port}",
                "--secret-file", str(self.secret_file),
                "--backend", "process", "--registry", str(self.registry.directory),
                "--checkpoint-dir", str(root / f"checkpoint-{node_id}"),
            ]
            for flag, value in self.timings.items():
                argv += [flag, value]
            if node_id in self.metrics_ports:
                argv += ["--metrics-listen", f"127.0.0.1:{self.metrics_ports[node_id]}"]
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
                "--targets", self.heartbeat_targets, "--secret-file", str(self.secret_file),
                *extra]
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

    def all_restart_lines(self, service: str) -> list[str]:
        """Every checker's `RESTART service=<service> ...` decision lines."""
        return [line for node_id in self.ports for line in self.restart_lines(node_id)
                if f"service={service} " in line]

    def new_pid(self, name: str, old_pid: int | None) -> int | None:
        """The live pid of `name` when it is not `old_pid` (restarted), else None."""
        pid = self.registry.live_pid(name)
        return pid if pid not in (None, old_pid) else None

    def heard_from(self, name: str, pid: int) -> bool:
        """Some checker received a heartbeat from this very process (`SEEN ... instance=...`)."""
        return any(_seen_from(line, name, pid)
                   for node_id in self.ports
                   for line in self.log(f"healthchecker-{node_id}").splitlines())

    def heard_by_all(self, name: str, pid: int) -> bool:
        return all(_seen_from(self._last_seen_line(node_id, name), name, pid)
                   for node_id in self.ports)

    def _last_seen_line(self, node_id: int, name: str) -> str:
        lines = [line for line in self.log(f"healthchecker-{node_id}").splitlines()
                 if f"SEEN service={name} instance=" in line]
        return lines[-1] if lines else ""

    def phase_lines(self, node_id: int, service: str, phase: str) -> list[str]:
        """`node_id`'s `PHASE service=<service> phase=<phase> ...` transition lines."""
        marker = f"PHASE service={service} phase={phase} "
        return [line for line in self.log(f"healthchecker-{node_id}").splitlines()
                if marker in line]

    def evaluated_after_now(self, node_id: int, marker: str = MARKER,
                            timeout_s: float = 15.0) -> None:
        """Proof that checker `node_id`, the leader, examined every service it supervises at a
        moment after this call (absence of action cannot be waited on; this can): the running
        dummy `marker` is killed now; its restart is decided by a supervision tick that comes
        after the kill, and every tick examines every service. The new marker's `phase=up` line
        comes from a later step of the same thread, so that tick's other lines are all logged.
        """
        ups = len(self.phase_lines(node_id, marker, "up"))
        old_pid = self.registry.live_pid(marker)
        assert old_pid is not None, f"the marker {marker!r} must be running"
        self.registry.kill(marker)
        wait_until(lambda: self.new_pid(marker, old_pid), timeout_s)
        wait_until(lambda: len(self.phase_lines(node_id, marker, "up")) > ups, timeout_s)

    def dropped_packets(self, node_id: int, reason: str) -> float | None:
        """`node_id`'s election packets dropped for `reason` (/metrics; None: not answering)."""
        from tests.integration.metrics_scrape import scrape

        try:
            _, samples = scrape(self.metrics_ports[node_id])
        except OSError:
            return None
        return samples.get(("healthchecker_election_packets_dropped_total",
                            (("reason", reason),)), 0.0)

    def udp_barrier(self, packet: bytes, reason: str, timeout_s: float = 15.0,
                    resend_s: float = 1.0) -> int:
        """Until every checker has read a `packet` (dropped for `reason`) sent to its election
        port after this call began, and so every packet queued to it before (a socket's
        datagrams are read in order). No other packet dropped for `reason` may be on its way.
        Resent when the kernel dropped it (a full socket buffer); returns how many were sent.
        Needs `metrics`."""
        sent = 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for node_id, port in self.ports.items():
                before = wait_until(lambda node_id=node_id: _some(
                    self.dropped_packets(node_id, reason)), timeout_s)
                deadline = time.monotonic() + timeout_s
                while True:
                    sock.sendto(packet, ("127.0.0.1", port))
                    sent += 1
                    resend_at = time.monotonic() + resend_s
                    while time.monotonic() < resend_at:
                        count = self.dropped_packets(node_id, reason)
                        if count is not None and count > before[0]:
                            break
                        time.sleep(0.02)
                    else:
                        assert time.monotonic() < deadline, (
                            f"checker {node_id} read no {reason} packet in {timeout_s}s")
                        continue
                    break
        return sent

    def leader(self, among: set[int] | None = None) -> int | None:
        """The one checker (of `among`, default all) whose last ROLE line says leader, and whom
        every other one of them follows."""
        roles = {node_id: self.current_role(node_id) for node_id in among or self.ports}
        leaders = [node_id for node_id, role in roles.items() if role == "leader"]
        if len(leaders) != 1:
            return None
        following = {role for node_id, role in roles.items() if node_id != leaders[0]}
        return leaders[0] if following <= {f"follower {leaders[0]}"} else None

    def shutdown(self) -> None:
        """Kill everything the registry knows, and whatever the checkers spawned, then reap.
        The checkers are frozen first (SIGSTOP; until no new one appears), so that none of
        them restarts what is killed after it: they restart at once now."""
        frozen = self._freeze_checkers()
        for pid in _children_of(frozen):
            kill_process_tree(pid)
        names = self.registry.names()
        for name in sorted(names, key=lambda n: not n.startswith("healthchecker-")):
            self.registry.kill(name)
        for pid in frozen:
            kill_process_tree(pid)
        for process in self.children:
            process.wait(timeout=5)

    def _freeze_checkers(self) -> set[int]:
        frozen: set[int] = set()
        for _ in range(FREEZE_ROUNDS_MAX):
            checkers = [n for n in self.registry.names() if n.startswith("healthchecker-")]
            pids = {pid for name in checkers if (pid := self.registry.live_pid(name))}
            pids |= {pid for pid in _children_of(frozen) if _is_checker(pid)}
            if pids <= frozen:
                return frozen
            for pid in pids - frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= pids
            time.sleep(0.05)
        return frozen


FREEZE_ROUNDS_MAX = 50


def _some(value: float | None) -> tuple[float] | None:
    """`value` in a truthy box (a count of 0 is an answer), None as is."""
    return None if value is None else (value,)


def _seen_from(line: str, name: str, pid: int) -> bool:
    """A `SEEN service=<name> instance=<host>:<pid>[:<nonce>]` line of process `pid`."""
    marker = f"SEEN service={name} instance="
    if marker not in line:
        return False
    instance = line.split(marker, 1)[1].split()[0]
    return instance.split(":")[1:2] == [str(pid)]


def _children_of(parents: set[int]) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in parents:
            children.append(int(stat.parent.name))
    return children


def _is_checker(pid: int) -> bool:
    try:
        return b"healthchecker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
