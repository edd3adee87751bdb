"""Killer logic without processes: choice parsing, excludes, and the bounded chaos loop."""

import io
import random

import pytest

from scripts.faults.backends import KillError
from scripts.faults.chaos import chaos, is_excluded
from scripts.killer import ask, parse_choice


class FakeBackend:
    def __init__(self, names, fail=()):
        self.alive = set(names)
        self.fail = set(fail)
        self.killed = []

    def running(self):
        return sorted(self.alive)

    def kill(self, name):
        if name in self.fail:
            raise KillError("gone")
        self.alive.discard(name)
        self.killed.append(name)
        return "pid=1"


class FakeTime:
    def __init__(self):
        self.now = 100.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_parse_choice_numbers_and_names():
    names = ["broker-1", "client-1", "healthchecker-3"]
    assert parse_choice("1, healthchecker-3", names) == ["broker-1", "healthchecker-3"]
    assert parse_choice("", names) == []
    for bad in ("0", "4", "broker-9"):
        with pytest.raises(ValueError):
            parse_choice(bad, names)


def test_ask_retries_then_gives_up():
    answers = iter(["9"] * 10)
    out = io.StringIO()
    assert ask(["a"], read=lambda prompt: next(answers), out=out) == []
    assert out.getvalue().count("neither a listed number") == 5


def test_excludes_are_prefixes():
    assert is_excluded("client-2", ["client"]) and not is_excluded("broker-1", ["client"])


def test_chaos_kills_one_random_victim_per_interval_and_stops_on_time():
    fake_time = FakeTime()
    backend = FakeBackend(["broker-1", "broker-2", "client-1", "healthchecker-1"])
    # Victims come back, as the health checkers would restart them.
    original_kill = backend.kill
    backend.kill = lambda name: (original_kill(name), backend.alive.add(name))[0]
    kills = chaos(backend, interval_s=5, duration_s=60, excludes=["client"],
                  rng=random.Random(1), clock=fake_time.clock, sleep=fake_time.sleep,
                  out=io.StringIO())
    assert len(kills) == 13  # t = 0, 5, ..., 60
    assert [kill.at_s for kill in kills] == [5.0 * i for i in range(13)]
    assert "client-1" not in backend.killed
    assert {"broker-1", "broker-2", "healthchecker-1"} == set(backend.killed)
    assert fake_time.now - 100.0 == 60.0


def test_chaos_logs_when_nothing_is_left_or_a_kill_fails():
    fake_time = FakeTime()
    out = io.StringIO()
    backend = FakeBackend(["a", "b"], fail=["b"])
    kills = chaos(backend, interval_s=1, duration_s=3, rng=random.Random(0),
                  clock=fake_time.clock, sleep=fake_time.sleep, out=out)
    assert [k.name for k in kills] == ["a"]
    assert "could not kill b" in out.getvalue()
    assert "chaos done: 1 kills" in out.getvalue()
