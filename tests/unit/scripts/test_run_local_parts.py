"""run_local's pieces without processes: session outcomes, the chaos guard, log tails, samples."""

import json
import sys
import time
from types import SimpleNamespace

import pytest

from healthchecker.local_registry import LocalServiceRegistry, ServiceSpec
from scripts import run_local
from scripts.generate_data import AIRPORTS_FILE, FLIGHTS_FILE
from scripts.run_local import (
    ChaosThread,
    ClientRun,
    InputFiles,
    LogTail,
    client_outcome,
    parse_args,
    sample_files,
)


def write_summary(results_dir, **fields):
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "summary.json").write_text(json.dumps(fields))


@pytest.fixture
def registry(tmp_path):
    registry = LocalServiceRegistry(tmp_path / "registry")
    registry.register(ServiceSpec("client-1", (sys.executable, "-c", "pass"), str(tmp_path)))
    return registry


def session(tmp_path):
    return ClientRun("client-1", "cid-1", tmp_path / "r", InputFiles(tmp_path, tmp_path))


def test_a_completed_summary_of_this_session_ends_it(tmp_path, registry):
    run = session(tmp_path)
    assert client_outcome(run, registry) is None
    write_summary(run.results_dir, client_id="other", status="completed", pid=1)
    assert client_outcome(run, registry) is None  # a stale file of another session
    write_summary(run.results_dir, client_id="cid-1", status="completed", pid=1)
    assert client_outcome(run, registry) == "completed" and run.summary["pid"] == 1


def test_a_failed_summary_counts_only_when_written_by_the_last_instance_which_exited(
        tmp_path, registry):
    run = session(tmp_path)
    exited = registry.spawn("client-1")
    exited.wait()
    write_summary(run.results_dir, client_id="cid-1", status="failed", pid=exited.pid + 100000)
    assert client_outcome(run, registry) is None  # an earlier instance: a restart follows
    write_summary(run.results_dir, client_id="cid-1", status="failed", pid=exited.pid)
    assert client_outcome(run, registry) == "failed"


class FakeBackend:
    def __init__(self, names):
        self.names = list(names)
        self.killed = []

    def running(self):
        return list(self.names)

    def kill(self, name):
        self.names.remove(name)
        self.killed.append(name)
        return "pid=1"


def test_chaos_never_kills_the_last_live_health_checker(capsys):
    backend = FakeBackend(["healthchecker-1", "healthchecker-2", "healthchecker-3"])
    chaos = ChaosThread(backend, interval_s=0.01, duration_s=60, seed=1).start()
    deadline = time.monotonic() + 5
    while len(backend.killed) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.1)  # ten more rounds with one checker left
    chaos.stop()
    assert len(backend.killed) == 2 and len(backend.names) == 1
    assert "nothing to kill" in capsys.readouterr().out


def test_chaos_thread_kills_on_schedule_and_stops_at_once(capsys):
    backend = FakeBackend([f"svc-{i}" for i in range(50)])
    chaos = ChaosThread(backend, interval_s=0.02, duration_s=60, seed=3).start()
    deadline = time.monotonic() + 5
    while len(backend.killed) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    started = time.monotonic()
    chaos.stop()
    assert time.monotonic() - started < 1.0 and not chaos.thread.is_alive()
    assert len(chaos.kills) == len(backend.killed) >= 3
    assert "[chaos]" in capsys.readouterr().out


def test_log_tail_prints_complete_new_lines_with_the_service_name(tmp_path, monkeypatch):
    lines = []
    monkeypatch.setattr(run_local, "say", lines.append)
    log = tmp_path / "client-1.log"
    tail = LogTail({"client-1": log})
    tail.print_new()  # no file yet
    log.write_text("first\nsecond, half")
    tail.print_new()
    with open(log, "a") as file:
        file.write(" done\n")
    tail.print_new()
    assert lines == ["[client-1] first", "[client-1] second, half done"]


def test_samples_are_reused_only_with_the_same_parameters(tmp_path, monkeypatch):
    calls = []

    def fake_generate(directory, rows, seed, invalid_rate):
        calls.append((rows, seed, invalid_rate))
        for name in (FLIGHTS_FILE, AIRPORTS_FILE):
            (directory / name).write_text(f"{rows}\n")
        return SimpleNamespace(invalid_total=0, seconds=0.0)

    monkeypatch.setattr(run_local, "say", lambda text: None)
    monkeypatch.setattr(run_local, "generate", fake_generate)
    first = sample_files(tmp_path, rows=200, seed=4, invalid_rate=0.0)
    assert sample_files(tmp_path, rows=200, seed=4, invalid_rate=0.0) == first
    assert calls == [(200, 4, 0.0)]
    sample_files(tmp_path, rows=300, seed=4, invalid_rate=0.0)
    (tmp_path / FLIGHTS_FILE).unlink()
    sample_files(tmp_path, rows=300, seed=4, invalid_rate=0.0)
    assert calls == [(200, 4, 0.0), (300, 4, 0.0), (300, 4, 0.0)]


@pytest.mark.parametrize("argv", [["--results-dir", "r", "--flights", "f"],
                                  ["--results-dir", "r", "--clients", "0"],
                                  ["--results-dir", "r", "--chaos-interval-s", "-1"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)
