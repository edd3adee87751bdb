"""The killer's --spare-last guard: a chaos loop never kills the last running health checker."""

import io
import random

from scripts import killer
from scripts.faults.backends import SpareLastBackend
from scripts.faults.chaos import chaos


class FakeBackend:
    """Services that stay dead once killed (nothing restarts them here)."""

    def __init__(self, names):
        self.alive = set(names)
        self.killed = []

    def running(self):
        return sorted(self.alive)

    def kill(self, name):
        self.alive.discard(name)
        self.killed.append(name)
        return "pid=1"

    def pause(self, name):
        return "pid=1 how=SIGSTOP"

    def leader(self):
        return None


def test_the_last_running_service_of_a_prefix_is_never_offered():
    backend = FakeBackend(["broker-1", "healthchecker-1", "healthchecker-2", "spark-master"])
    spared = SpareLastBackend(backend, ["healthchecker-", "spark-"])
    assert spared.running() == ["broker-1", "healthchecker-1", "healthchecker-2"]
    spared.kill("healthchecker-2")
    assert spared.running() == ["broker-1"]


def test_chaos_until_nothing_else_is_left_keeps_one_health_checker():
    names = ["broker-1", "client-1", "query-service"] + [f"healthchecker-{i}" for i in (1, 2, 3)]
    backend = FakeBackend(names)
    now = [0.0]
    kills = chaos(SpareLastBackend(backend, ["healthchecker-"]), interval_s=1.0, duration_s=20.0,
                  rng=random.Random(3), clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + s), out=io.StringIO())
    assert len(kills) == len(names) - 1
    assert len([n for n in backend.alive if n.startswith("healthchecker-")]) == 1
    assert backend.alive <= {f"healthchecker-{i}" for i in (1, 2, 3)}


def test_the_command_line_wraps_the_backend_only_when_asked(monkeypatch):
    backends = []

    def fake_chaos(backend, *args, **kwargs):
        backends.append(backend)
        return []

    monkeypatch.setattr(killer, "chaos", fake_chaos)
    monkeypatch.setattr(killer, "DockerBackend", lambda project: FakeBackend(["broker-1"]))
    assert killer.main(["--random", "--spare-last", "healthchecker-"]) == 0
    assert killer.main(["--random"]) == 0
    assert isinstance(backends[0], SpareLastBackend)
    assert backends[0].prefixes == ("healthchecker-",)
    assert isinstance(backends[1], FakeBackend)
