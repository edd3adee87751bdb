"""run_local's pieces without processes: session outcomes, the chaos guard, log tails, samples,
the broker cluster's command lines and readiness, and the split into scripts/launcher/."""

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.address import parse_peers
from common.flights.session_records import SESSIONS_TOPIC
from common.kaska.errors import BrokerUnavailableError, NotLeaderError, TopicAlreadyExistsError
from healthchecker.local_registry import LocalServiceRegistry, ServiceSpec
from scripts import run_local
from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE
from scripts.launcher import brokers, console, ports, sample_data
from scripts.launcher.brokers import (
    BrokerNode,
    bootstrap_list,
    broker_count_error,
    broker_spec,
    peers_of,
    plan_brokers,
    wait_for_leader,
    wait_until_listening,
)
from scripts.launcher.chaos import ChaosThread
from scripts.launcher.config import LaunchConfig
from scripts.launcher.errors import RunLocalError
from scripts.launcher.layout import RunLayout
from scripts.launcher.local_cluster import broker_argv
from scripts.launcher.log_tail import LogTail
from scripts.launcher.platform import HEALTHCHECKERS, LocalPlatform, stop_order
from scripts.launcher.ports import free_ports
from scripts.launcher.sample_data import InputFiles, sample_files
from scripts.launcher.sessions import ClientRun, ClientSettings, client_argv, client_outcome
from scripts.run_local import parse_args


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


def test_a_completed_session_still_writing_its_ack_is_not_over_yet(tmp_path, registry):
    """The client writes summary.json (completed, results_acked false) before its ack; while
    that instance runs the session is not over (a teardown then would lose the ack)."""
    registry.register(ServiceSpec("client-2", (sys.executable, "-c",
                                               "import time; time.sleep(30)"), str(tmp_path)))
    run = ClientRun("client-2", "cid-2", tmp_path / "r2", InputFiles(tmp_path, tmp_path))
    acking = registry.spawn("client-2")
    try:
        write_summary(run.results_dir, client_id="cid-2", status="completed", pid=acking.pid,
                      results_acked=False)
        assert client_outcome(run, registry) is None
        write_summary(run.results_dir, client_id="cid-2", status="completed", pid=acking.pid,
                      results_acked=True)
        assert client_outcome(run, registry) == "completed"
        write_summary(run.results_dir, client_id="cid-2", status="completed", pid=acking.pid,
                      results_acked=False)
    finally:
        acking.kill()
        acking.wait()
    # It exited without acking (broker away): completed all the same, the results are there.
    assert client_outcome(run, registry) == "completed"


class FakeBackend:
    def __init__(self, names):
        self.names = list(names)
        self.killed = []
        self.rounds = 0  # calls of running(): one a chaos round

    def running(self):
        self.rounds += 1
        return list(self.names)

    def kill(self, name):
        self.names.remove(name)
        self.killed.append(name)
        return "pid=1"

    def pause(self, name):
        raise AssertionError("no pauses without --chaos-pause-ratio")

    def leader(self):
        return None


def _wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.005)


def test_chaos_never_kills_the_last_live_health_checker(capsys):
    backend = FakeBackend(["healthchecker-1", "healthchecker-2", "healthchecker-3"])
    chaos = ChaosThread(backend, interval_s=0.01, duration_s=60, seed=1).start()
    _wait_until(lambda: len(backend.killed) >= 2)
    rounds = backend.rounds
    _wait_until(lambda: backend.rounds >= rounds + 10)  # ten more rounds with one checker left
    chaos.stop()
    assert not chaos.thread.is_alive()
    assert len(backend.killed) == 2 and len(backend.names) == 1
    assert "nothing to kill" in capsys.readouterr().out


def test_chaos_thread_kills_on_schedule_and_stops_at_once(capsys):
    backend = FakeBackend([f"svc-{i}" for i in range(50)])
    chaos = ChaosThread(backend, interval_s=0.02, duration_s=60, seed=3).start()
    _wait_until(lambda: len(backend.killed) >= 3)
    chaos.stop()
    # "At once": stop() joins the thread for at most chaos.STOP_JOIN_S, far below the 60 s the
    # loop would otherwise run, and it is over by then.
    assert not chaos.thread.is_alive()
    assert len(chaos.faults) == len(backend.killed) >= 3
    assert "[chaos]" in capsys.readouterr().out


def test_log_tail_prints_complete_new_lines_with_the_service_name(tmp_path, monkeypatch):
    lines = []
    monkeypatch.setattr(console, "say", lines.append)
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

    monkeypatch.setattr(console, "say", lambda text: None)
    monkeypatch.setattr(sample_data, "generate", fake_generate)
    first = sample_files(tmp_path, rows=200, seed=4, invalid_rate=0.0)
    assert sample_files(tmp_path, rows=200, seed=4, invalid_rate=0.0) == first
    assert calls == [(200, 4, 0.0)]
    sample_files(tmp_path, rows=300, seed=4, invalid_rate=0.0)
    (tmp_path / FLIGHTS_FILE).unlink()
    sample_files(tmp_path, rows=300, seed=4, invalid_rate=0.0)
    assert calls == [(200, 4, 0.0), (300, 4, 0.0), (300, 4, 0.0)]


@pytest.mark.parametrize("argv", [["--results-dir", "r", "--flights", "f"],
                                  ["--results-dir", "r", "--clients", "0"],
                                  ["--results-dir", "r", "--chaos-interval-s", "-1"],
                                  ["--results-dir", "r", "--brokers", "2"],
                                  ["--results-dir", "r", "--brokers", "0"],
                                  ["--results-dir", "r", "--brokers", "11"],
                                  ["--results-dir", "r", "--client-rows", "10,x"],
                                  ["--results-dir", "r", "--client-rows", "10,-1"],
                                  ["--results-dir", "r", "--client-rows", "10",
                                   "--flights", "f", "--airports", "a"],
                                  ["--results-dir", "r", "--client-start-interval-s", "-1"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_client_rows_size_each_client_s_sample_and_set_their_number():
    args = parse_args(["--results-dir", "r", "--client-rows", "300,0,50", "--rows", "7"])
    assert args.clients == 3 and args.client_rows == (300, 0, 50)
    config = LaunchConfig(**vars(args))
    assert [config.rows_of(i) for i in (1, 2, 3)] == [300, 0, 50]
    assert LaunchConfig(Path("r"), rows=7, clients=2).rows_of(2) == 7


# --- the split: scripts/run_local.py is the command line over scripts/launcher/ ------------------


def test_every_name_run_local_exports_is_importable():
    for name in run_local.__all__:
        assert hasattr(run_local, name), name
    assert free_ports is ports.free_ports


def test_free_ports_are_distinct():
    ports = free_ports(6)
    assert len(set(ports)) == 6 and all(1 <= port <= 65535 for port in ports)


def test_three_brokers_by_default_and_any_odd_count_is_accepted():
    assert parse_args(["--results-dir", "r"]).brokers == 3
    assert parse_args(["--results-dir", "r", "--brokers", "1"]).brokers == 1
    assert parse_args(["--results-dir", "r", "--brokers", "5"]).brokers == 5


def test_an_even_broker_count_is_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--results-dir", "r", "--brokers", "4"])
    assert exited.value.code == 2
    assert "--brokers must be odd" in capsys.readouterr().err
    assert broker_count_error(3) is None and "odd" in broker_count_error(2)
    assert "[1, " in broker_count_error(0)


# --- the broker cluster ---------------------------------------------------------------------------


def layout_in(tmp_path: Path) -> RunLayout:
    return RunLayout(tmp_path / "results", tmp_path / "results" / "run" / "broker-data",
                     keep_broker_data=False)


def test_each_broker_gets_its_own_port_and_data_dir_under_the_run_dir(tmp_path):
    layout = layout_in(tmp_path)
    nodes = plan_brokers([7001, 7002, 7003], layout)
    assert [(n.node_id, n.name, n.address) for n in nodes] == [
        (1, "broker-1", "127.0.0.1:7001"), (2, "broker-2", "127.0.0.1:7002"),
        (3, "broker-3", "127.0.0.1:7003")]
    assert [n.data_dir for n in nodes] == [layout.run_dir / "broker-data" / f"broker-{i}"
                                           for i in (1, 2, 3)]
    assert bootstrap_list(nodes) == "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_each_of_three_brokers_names_the_other_two_as_peers_never_itself(tmp_path):
    nodes = plan_brokers([7001, 7002, 7003], layout_in(tmp_path))
    expected = {1: ["2@127.0.0.1:7002", "3@127.0.0.1:7003"],
                2: ["1@127.0.0.1:7001", "3@127.0.0.1:7003"],
                3: ["1@127.0.0.1:7001", "2@127.0.0.1:7002"]}
    for node in nodes:
        argv = broker_argv(broker_spec(node, nodes, "127.0.0.1:9001,127.0.0.1:9002",
                                       tmp_path / "secret"))
        assert argv[:2] == ["-m", "services.broker"]
        assert _flag(argv, "--node-id") == str(node.node_id)
        assert _flag(argv, "--listen") == node.address
        assert _flag(argv, "--data-dir") == str(node.data_dir)
        assert _flag(argv, "--heartbeat-targets") == "127.0.0.1:9001,127.0.0.1:9002"
        assert _flag(argv, "--secret-file") == str(tmp_path / "secret")
        assert "--secret" not in argv  # the secret itself never on a command line
        assert argv.count("--peers") == 1
        peers = _flag(argv, "--peers").split(",")
        assert peers == expected[node.node_id]
        assert parse_peers(_flag(argv, "--peers")) == peers_of(node, nodes)
        assert not any(peer.startswith(f"{node.node_id}@") for peer in peers)
        assert node.address not in _flag(argv, "--peers")


def test_a_cluster_of_one_gets_no_peers_flag(tmp_path):
    [node] = plan_brokers([7001], layout_in(tmp_path))
    argv = broker_argv(broker_spec(node, [node], "127.0.0.1:9001", tmp_path / "secret"))
    assert "--peers" not in argv and _flag(argv, "--node-id") == "1"


def test_the_platform_registers_every_broker_and_hands_out_the_whole_bootstrap_list(
        tmp_path, monkeypatch):
    monkeypatch.setattr(console, "say", lambda text: None)
    layout = layout_in(tmp_path)
    layout.prepare()
    platform = LocalPlatform(layout, "local[2]", broker_count=3)
    monkeypatch.setattr(platform, "spawn", lambda name, foreground=False: 4242)
    ports = (platform.checker_ports + platform.checker_status_ports
             + platform.checker_metrics_ports
             + [node.port for node in platform.broker_nodes] + platform.broker_metrics_ports
             + [platform.status_port, platform.spark_ui_port, platform.service_metrics_port])
    assert len(platform.checker_ports) == HEALTHCHECKERS and len(set(ports)) == len(ports)
    platform.start_brokers()
    platform.start_service()
    platform.start_status()
    assert platform.registry.names() == ["broker-1", "broker-2", "broker-3", "query-service",
                                         "status"]
    for node, metrics_port in zip(platform.broker_nodes, platform.broker_metrics_ports,
                                  strict=True):
        spec = platform.registry.spec(node.name)
        assert spec.argv[0] == sys.executable
        assert list(spec.argv[1:]) == broker_argv(broker_spec(
            node, platform.broker_nodes, platform.heartbeat_targets, platform.secret_file,
            metrics_port))
        assert _flag(spec.argv, "--metrics-listen") == f"127.0.0.1:{metrics_port}"
        assert spec.log_file == str(layout.log_path(node.name))
    status = list(platform.registry.spec("status").argv)
    assert _flag(status, "--broker-metrics") == ",".join(
        f"127.0.0.1:{port}" for port in platform.broker_metrics_ports)
    assert _flag(status, "--checkers") == ",".join(
        f"127.0.0.1:{port}" for port in platform.checker_status_ports)
    assert _flag(status, "--listen") == f"127.0.0.1:{platform.status_port}"
    service = list(platform.registry.spec("query-service").argv)
    assert _flag(service, "--metrics-listen") == f"127.0.0.1:{platform.service_metrics_port}"
    assert _flag(list(platform.registry.spec("query-service").argv),
                 "--ui-port") == str(platform.spark_ui_port)
    bootstrap = ",".join(node.address for node in platform.broker_nodes)
    assert platform.brokers == bootstrap
    assert _flag(list(platform.registry.spec("query-service").argv), "--brokers") == bootstrap
    run = ClientRun("client-1", "cid", tmp_path / "r", InputFiles(tmp_path, tmp_path))
    client = client_argv(run, platform, ClientSettings(300, 4, 2500.0))
    assert _flag(client, "--brokers") == bootstrap
    assert _flag(client, "--upload-rows-per-s-max") == "2500.0"
    # Every process that signs or checks frames reads the cluster secret from the same file.
    for argv in (service, status, list(platform.registry.spec("broker-1").argv), client):
        assert _flag(argv, "--secret-file") == str(platform.secret_file)
        assert "--secret" not in argv


def test_brokers_stop_last_and_together_checkers_first():
    names = ["broker-1", "broker-2", "broker-3", "client-1", "client-2", "healthchecker-1",
             "healthchecker-2", "query-service"]
    assert stop_order(names) == [["healthchecker-1", "healthchecker-2"],
                                 ["client-1", "client-2"], ["query-service"],
                                 ["broker-1", "broker-2", "broker-3"]]
    assert stop_order(["broker-1", "healthchecker-1"]) == [["healthchecker-1"], ["broker-1"]]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def nodes_with_logs(tmp_path, count=3):
    nodes = [BrokerNode(i, 7000 + i, tmp_path / f"d{i}") for i in range(1, count + 1)]
    return nodes, (lambda name: tmp_path / f"{name}.log")


def test_listening_waits_for_every_broker_s_line(tmp_path):
    nodes, log_path = nodes_with_logs(tmp_path)
    clock = FakeClock()
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        clock.sleep(seconds)
        if len(polls) == 2:
            log_path("broker-1").write_text("kaska broker 1 listening on 127.0.0.1:7001\n")
            log_path("broker-2").write_text("INFO starting\nkaska broker 2 listening on "
                                             "127.0.0.1:7002\n")
            # broker 3's log names another broker: not its line
            log_path("broker-3").write_text("peer kaska broker 1 listening on 127.0.0.1:7001\n")
        if len(polls) == 4:
            log_path("broker-3").write_text("kaska broker 3 listening on 127.0.0.1:7003\n")

    waited = wait_until_listening(nodes, log_path, lambda name: None, timeout_s=30,
                                  clock=clock, sleep=sleep)
    assert len(polls) == 4 and waited == pytest.approx(4 * brokers.POLL_S)


def test_a_broker_that_exits_before_listening_fails_the_wait_at_once_with_its_log(tmp_path):
    nodes, log_path = nodes_with_logs(tmp_path)
    log_path("broker-1").write_text("kaska broker 1 listening on 127.0.0.1:7001\n")
    log_path("broker-2").write_text("python -m services.broker: error: bad peers\n")
    exited = {"broker-2": 2}
    with pytest.raises(RunLocalError, match="broker-2 exited with status 2") as raised:
        wait_until_listening(nodes, log_path, exited.get, timeout_s=30,
                             clock=FakeClock(), sleep=lambda s: None)
    assert "error: bad peers" in str(raised.value)


def test_listening_times_out_naming_the_silent_brokers(tmp_path):
    nodes, log_path = nodes_with_logs(tmp_path)
    log_path("broker-2").write_text("kaska broker 2 listening on 127.0.0.1:7002\n")
    clock = FakeClock()
    with pytest.raises(RunLocalError, match="broker-1, broker-3 not listening after 5 s"):
        wait_until_listening(nodes, log_path, lambda name: None, timeout_s=5, clock=clock,
                             sleep=clock.sleep)


class FakeAdmin:
    """An admin client whose creates raise the queued outcomes, one each (a cluster still
    electing), then succeed."""

    def __init__(self, outcomes, bootstrap, calls):
        self.outcomes = outcomes
        self.bootstrap = bootstrap
        self.calls = calls

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.calls.append(("close", self.bootstrap))

    def create_topic(self, name, partitions):
        self.calls.append(("create", self.bootstrap, name, partitions))
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome

    def topics(self):
        self.calls.append(("topics", self.bootstrap))
        return {SESSIONS_TOPIC: 1}


def test_the_leader_wait_retries_creating_sessions_starting_from_the_next_broker(tmp_path):
    nodes = [BrokerNode(i, 7000 + i, tmp_path) for i in (1, 2, 3)]
    outcomes = [BrokerUnavailableError("down"), NotLeaderError("no leader yet"),
                TopicAlreadyExistsError("exists")]
    calls = []
    clock = FakeClock()
    waited = wait_for_leader(nodes, timeout_s=30,
                             admin_factory=lambda b: FakeAdmin(outcomes, b, calls),
                             clock=clock, sleep=clock.sleep)
    creates = [call for call in calls if call[0] == "create"]
    assert [call[1] for call in creates] == [
        "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
        "127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7001",
        "127.0.0.1:7003,127.0.0.1:7001,127.0.0.1:7002"]
    assert {call[2:] for call in creates} == {(SESSIONS_TOPIC, 1)}
    assert calls[-2:] == [("topics", creates[-1][1]), ("close", creates[-1][1])]
    assert sum(call[0] == "close" for call in calls) == 3  # every attempt closes its client
    assert waited == pytest.approx(2 * brokers.POLL_S)


def test_no_leader_in_time_is_a_clear_run_local_error(tmp_path):
    nodes = [BrokerNode(i, 7000 + i, tmp_path) for i in (1, 2, 3)]
    clock = FakeClock()
    never = [NotLeaderError("no leader") for _ in range(1000)]
    with pytest.raises(RunLocalError, match=r"the 3 broker\(s\) elected no leader in 2 s") as e:
        wait_for_leader(nodes, timeout_s=2, admin_factory=lambda b: FakeAdmin(never, b, []),
                        clock=clock, sleep=clock.sleep)
    assert "NotLeaderError: no leader" in str(e.value)
