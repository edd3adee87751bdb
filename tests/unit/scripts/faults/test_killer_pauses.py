"""The killer's pauses and chaos options without processes: the pause ratio, the fixed cadence,
early stops, the victim picker and leader in the loop, the command line, and how the Docker
backend pauses a container (SIGSTOP, or the freezer when PID 1 is an init)."""

import io
import random

import pytest

from scripts import killer
from scripts.faults import backends
from scripts.faults.backends import DockerBackend, KillError, runs_under_init
from scripts.faults.chaos import ACTION_KILL, ACTION_PAUSE, ChaosConfigError, ChaosThread, chaos
from scripts.faults.victims import RoundRobinKinds


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeBackend:
    """Services come back at once, as if healed; each signal may take fake time."""

    def __init__(self, names, time=None, signal_s=0.0, leader=None):
        self.names = sorted(names)
        self.time = time
        self.signal_s = signal_s
        self.current_leader = leader
        self.done = []  # (action, name)

    def running(self):
        return list(self.names)

    def _signal(self, action, name):
        if self.time is not None:
            self.time.now += self.signal_s
        self.done.append((action, name))
        return "pid=1"

    def kill(self, name):
        return self._signal(ACTION_KILL, name)

    def pause(self, name):
        return self._signal(ACTION_PAUSE, name)

    def leader(self):
        return self.current_leader


def run_chaos(backend, fake_time, **kwargs):
    out = io.StringIO()
    faults = chaos(backend, interval_s=5, duration_s=kwargs.pop("duration_s", 60),
                   rng=random.Random(kwargs.pop("seed", 4)), clock=fake_time.clock,
                   sleep=fake_time.sleep, out=out, wall_clock=fake_time.clock, **kwargs)
    return faults, out.getvalue()


def test_a_pause_ratio_mixes_pauses_and_kills_and_prints_each():
    fake_time = FakeTime()
    backend = FakeBackend(["broker-1", "client-1", "healthchecker-1"])
    faults, out = run_chaos(backend, fake_time, pause_ratio=0.3)
    actions = [fault.action for fault in faults]
    assert ACTION_PAUSE in actions and ACTION_KILL in actions
    assert [(f.action, f.name) for f in faults] == backend.done
    for fault in faults:
        assert f"{fault.action} t={fault.at_s:.1f}s service={fault.name} pid=1" in out
    pauses = actions.count(ACTION_PAUSE)
    assert f"chaos done: {len(faults) - pauses} kills, {pauses} pauses" in out


def test_all_or_no_pauses_and_no_extra_draws_without_pauses():
    names = ["a", "b", "c", "d"]
    everything_paused, _ = run_chaos(FakeBackend(names), FakeTime(), pause_ratio=1.0)
    assert {fault.action for fault in everything_paused} == {ACTION_PAUSE}
    only_kills, _ = run_chaos(FakeBackend(names), FakeTime(), pause_ratio=0.0)
    # Without pauses the random stream is the victims' alone: a seed replays an older run.
    replay = random.Random(4)
    assert [fault.name for fault in only_kills] == [replay.choice(names) for _ in only_kills]
    assert {fault.action for fault in only_kills} == {ACTION_KILL}


def test_the_cadence_is_fixed_whatever_a_fault_costs():
    fake_time = FakeTime()
    backend = FakeBackend(["a", "b"], time=fake_time, signal_s=2.0)
    faults, _ = run_chaos(backend, fake_time, duration_s=20)
    assert [fault.at_s for fault in faults] == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert [fault.wall_at for fault in faults] == [0.0, 5.0, 10.0, 15.0, 20.0]


def test_stop_when_sees_the_faults_so_far():
    fake_time = FakeTime()
    faults, _ = run_chaos(FakeBackend(["a"]), fake_time,
                          stop_when=lambda so_far: len(so_far) >= 3)
    assert len(faults) == 3 and fake_time.now == 15.0


def test_the_picker_gets_the_leader_and_faults_record_it():
    fake_time = FakeTime()
    backend = FakeBackend(["broker-1", "client-1", "healthchecker-1", "healthchecker-2"],
                          leader="healthchecker-2")
    faults, out = run_chaos(backend, fake_time, duration_s=10, picker=RoundRobinKinds(),
                            leader=backend.leader)
    assert [fault.name for fault in faults] == ["client-1", "healthchecker-2", "broker-1"]
    assert [fault.leader for fault in faults] == [False, True, False]
    assert "service=healthchecker-2 pid=1 leader" in out


@pytest.mark.parametrize("interval_s, duration_s, pause_ratio", [
    (0, 10, 0.0), (-1, 10, 0.0), (5, -1, 0.0), (5, 10, -0.1), (5, 10, 1.5)])
def test_bad_settings_are_named_errors(interval_s, duration_s, pause_ratio):
    with pytest.raises(ChaosConfigError):
        chaos(FakeBackend(["a"]), interval_s, duration_s, pause_ratio=pause_ratio,
              out=io.StringIO())
    with pytest.raises(ChaosConfigError):
        ChaosThread(FakeBackend(["a"]), interval_s, duration_s, pause_ratio=pause_ratio)


def test_the_command_line_pauses_named_services_and_checks_its_values(monkeypatch, capsys):
    backend = FakeBackend(["broker-1", "query-service"])
    monkeypatch.setattr(killer, "DockerBackend", lambda project: backend)
    assert killer.main(["--services", "query-service", "--pause"]) == 0
    assert killer.main(["--services", "broker-1"]) == 0
    assert backend.done == [(ACTION_PAUSE, "query-service"), (ACTION_KILL, "broker-1")]
    assert "PAUSE t=" in capsys.readouterr().out
    for bad in (["--random", "--pause-ratio", "2"], ["--random", "--pause"],
                ["--random", "--interval-s", "0"]):
        with pytest.raises(SystemExit):
            killer.main(bad)


def test_the_command_line_chaos_loop_takes_the_new_options(monkeypatch):
    calls = []
    monkeypatch.setattr(killer, "chaos", lambda *args, **kwargs: calls.append(kwargs) or [])
    monkeypatch.setattr(killer, "DockerBackend", lambda project: FakeBackend(["a"]))
    assert killer.main(["--random", "--pause-ratio", "0.3", "--victims", "round-robin"]) == 0
    assert calls[0]["pause_ratio"] == 0.3
    assert isinstance(calls[0]["picker"], RoundRobinKinds)


class FakeContainer:
    def __init__(self, entrypoint=None, init=None, fail=None):
        self.attrs = {"Config": {"Entrypoint": entrypoint}, "HostConfig": {"Init": init}}
        self.short_id = "abc123"
        self.status = "running"
        self.fail = fail
        self.calls = []

    def kill(self, signal="SIGKILL"):
        if self.fail:
            raise self.fail
        self.calls.append(("kill", signal))

    def pause(self):
        if self.fail:
            raise self.fail
        self.calls.append(("pause", None))


def test_an_init_as_pid_1_is_recognised():
    assert runs_under_init(FakeContainer(["/usr/bin/tini", "--"]))
    assert runs_under_init(FakeContainer("docker-init --"))
    assert runs_under_init(FakeContainer(None, init=True))
    assert not runs_under_init(FakeContainer(["python", "-m", "client"]))
    assert not runs_under_init(FakeContainer(None))


def docker_backend_with(container):
    backend = DockerBackend.__new__(DockerBackend)  # no engine: the containers are fakes
    backend._running_containers = lambda: {"svc": container}
    return backend


def test_the_docker_backend_freezes_under_an_init_and_sigstops_otherwise():
    under_tini = FakeContainer(["/usr/bin/tini", "--"])
    assert docker_backend_with(under_tini).pause("svc") == "container=abc123 how=freeze"
    assert under_tini.calls == [("pause", None)]
    plain = FakeContainer(["python"])
    assert docker_backend_with(plain).pause("svc") == "container=abc123 how=SIGSTOP"
    assert plain.calls == [("kill", "SIGSTOP")]
    with pytest.raises(KillError, match="no running container"):
        docker_backend_with(plain).pause("other")


def test_an_engine_refusal_is_a_kill_error():
    from docker.errors import APIError

    refusing = FakeContainer(["python"], fail=APIError("409 Conflict: is not running"))
    backend = docker_backend_with(refusing)
    for hit in (backend.kill, backend.pause):
        with pytest.raises(KillError, match="is not running"):
            hit("svc")


def test_pause_draws_do_not_depend_on_who_runs():
    """With a seed, the k-th fault is a pause or a kill whoever the victims are (the e2e chaos
    round relies on it: tests/e2e/test_compose_chaos.py CHAOS_SEED)."""
    sequences = []
    for names in (["a"], [f"svc-{i}" for i in range(11)]):
        faults, _ = run_chaos(FakeBackend(names), FakeTime(), duration_s=45, pause_ratio=0.3,
                              seed=28)  # CHAOS_SEED 27 + round 1
        sequences.append([fault.action for fault in faults])
    assert sequences[0] == sequences[1]
    pauses = [index + 1 for index, action in enumerate(sequences[0]) if action == ACTION_PAUSE]
    assert pauses == [1, 2, 4, 9, 10]


class BrokenBackend(FakeBackend):
    def running(self):
        raise OSError("the engine went away")


def test_a_chaos_thread_shows_its_faults_live_and_whether_it_finished(monkeypatch):
    monkeypatch.setattr("threading.excepthook", lambda args: None)  # the crash below is wanted
    backend = FakeBackend(["a", "b"])
    chaos_thread = ChaosThread(backend, interval_s=0.01, duration_s=0.05,
                                      rng=random.Random(1), out=io.StringIO(),
                                      stop_when=lambda faults: len(faults) >= 2).start()
    chaos_thread.thread.join(timeout=30)
    assert chaos_thread.finished.is_set() and len(chaos_thread.faults) == 2
    assert [(f.action, f.name) for f in chaos_thread.faults] == backend.done
    broken = ChaosThread(BrokenBackend(["a"]), interval_s=0.01, duration_s=0.05,
                                out=io.StringIO()).start()
    broken.thread.join(timeout=30)
    assert not broken.thread.is_alive() and not broken.finished.is_set()


def engine_error(status_code, message):
    import requests
    from docker.errors import APIError

    response = requests.Response()
    response.status_code = status_code
    return APIError(message, response=response, explanation=message)


class FlakyFreezer(FakeContainer):
    """`docker pause` that fails with the given errors first (cgroup v1's "unable to freeze")."""

    def __init__(self, errors):
        super().__init__(["/usr/bin/tini", "--"])
        self.errors = list(errors)

    def pause(self):
        self.calls.append(("pause", None))
        if self.errors:
            raise self.errors.pop(0)


def test_a_freeze_the_engine_gives_up_on_is_retried_a_refusal_is_not(monkeypatch):
    monkeypatch.setattr(backends, "FREEZE_RETRY_S", 0.0)
    unable = engine_error(500, "OCI runtime pause failed: unable to freeze: unknown")
    flaky = FlakyFreezer([unable])
    assert docker_backend_with(flaky).pause("svc").endswith("how=freeze")
    assert len(flaky.calls) == 2
    stuck = FlakyFreezer([unable] * backends.FREEZE_ATTEMPTS)
    with pytest.raises(KillError, match="unable to freeze"):
        docker_backend_with(stuck).pause("svc")
    assert len(stuck.calls) == backends.FREEZE_ATTEMPTS
    refused = FlakyFreezer([engine_error(409, "is already paused")])
    with pytest.raises(KillError, match="already paused"):
        docker_backend_with(refused).pause("svc")
    assert len(refused.calls) == 1


def test_the_local_backend_names_the_leader_its_live_checkers_agree_on(tmp_path):
    import os

    from healthchecker.local_registry import LocalServiceRegistry, ServiceSpec

    registry = LocalServiceRegistry(tmp_path / "registry")
    roles = {"healthchecker-1": "ROLE node=1 role=follower leader=2",
             "healthchecker-2": "ROLE node=2 role=leader",
             "healthchecker-3": "ROLE node=3 role=leader"}  # a stale claim of a dead checker
    for name, line in roles.items():
        log_file = tmp_path / f"{name}.log"
        log_file.write_text(f"12:00:00.000 healthchecker.node INFO {line}\n")
        registry.register(ServiceSpec(name, ("true",), cwd="/", log_file=str(log_file)))
    for name in ("healthchecker-1", "healthchecker-2"):
        registry.write_pid(name, os.getpid())  # this process: alive
    backend = backends.LocalBackend(registry.directory)
    assert backend.leader() == "healthchecker-2"
    (tmp_path / "healthchecker-1.log").write_text("ROLE node=1 role=electing previous=2\n")
    assert backend.leader() is None
