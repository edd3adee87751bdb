"""The Compose generator: the committed default rendering is current, and shapes render right."""

import io
import re

import pytest
import yaml

from scripts import compose_generator
from scripts.deploy.compose_file import (
    DEV_FILE,
    DeploymentShape,
    DeploymentShapeError,
    PublishedPorts,
    PublishedPortsError,
    ask,
    render,
)
from services.broker.__main__ import config_from_args, parse_args


def _services(text: str) -> dict:
    return yaml.safe_load(text)["services"]


def test_committed_dev_file_is_the_default_rendering():
    assert DEV_FILE.read_text() == render(DeploymentShape()), (
        "compose/docker-compose-dev.yaml is stale: run "
        "`python -m scripts.compose_generator --defaults --out compose/docker-compose-dev.yaml`"
    )


def test_counts_give_that_many_services_each_wired_to_every_health_checker():
    text = render(DeploymentShape(brokers=3, healthcheckers=5, spark_workers=4, clients=2))
    services = _services(text)
    names = set(services)
    assert {f"broker-{i}" for i in range(1, 4)} <= names
    assert {f"healthchecker-{i}" for i in range(1, 6)} <= names
    assert {f"spark-worker-{i}" for i in range(1, 5)} <= names
    assert {"client-1", "client-2"} <= names and "client-3" not in names
    targets = ",".join(f"healthchecker-{i}:9500" for i in range(1, 6))
    assert f"--heartbeat-targets={targets}" in services["broker-2"]["command"]
    assert f"--heartbeat-targets={targets}" in services["query-service"]["command"]
    assert f"--heartbeat-targets {targets}" in services["client-2"]["command"][-1]
    assert "--peers=1@broker-1:9092,3@broker-3:9092" in services["broker-2"]["command"]
    probes = [a for a in services["healthchecker-4"]["command"] if a.startswith("--probe=")]
    # HTTP on the web UIs: a paused JVM still completes TCP handshakes on its RPC port.
    assert probes == ["--probe=spark-master=http://spark-master:8080/"] + [
        f"--probe=spark-worker-{i}=http://spark-worker-{i}:8081/" for i in range(1, 5)] + [
        "--probe=prometheus=http://prometheus:9090/-/healthy"]
    assert not any("restart-grace" in a for a in services["healthchecker-4"]["command"])


def test_every_service_is_labelled_and_none_has_a_restart_policy():
    services = _services(render(DeploymentShape(clients=2)))
    for name, service in services.items():
        labels = service["labels"]
        assert labels["flights.service"] == name
        assert labels["flights.project"] == "${COMPOSE_PROJECT_NAME:-flights-optimizer}"
        assert labels["flights.supervised"] == ("false" if name == "datagen" else "true")
        assert "restart" not in service, name


def test_every_service_logs_bounded_and_every_long_running_one_is_probed_with_a_deadline():
    services = _services(render(DeploymentShape(clients=2)))
    for name, service in services.items():
        assert service["logging"] == {"driver": "json-file",
                                      "options": {"max-size": "10m", "max-file": "5"}}, name
        if name == "datagen":
            assert "healthcheck" not in service  # one-shot
            continue
        check = service["healthcheck"]
        test = check["test"]
        if name.startswith("client-"):
            assert test[0] == "CMD-SHELL" and "/proc/" in test[1], test
        else:
            assert test[:4] == ["CMD", "python", "-m", "common.probe"], (name, test)
            assert test[-2:] == ["--timeout-s", "3"], (name, test)
        assert check["timeout"] == "10s" and check["retries"] == 3, name
    assert services["broker-2"]["healthcheck"]["test"][4] == "http://127.0.0.1:9100/healthz"
    assert services["spark-worker-1"]["healthcheck"]["test"][4] == "http://127.0.0.1:8081/"


def test_prometheus_scrapes_every_service_of_the_rendering_and_loads_the_rules():
    services = _services(render(DeploymentShape(brokers=5, healthcheckers=2, spark_workers=3)))
    prometheus = services["prometheus"]
    config = yaml.safe_load(prometheus["environment"]["PROMETHEUS_CONFIG"])
    jobs = {job["job_name"]: (job["metrics_path"], job["static_configs"][0]["targets"])
            for job in config["scrape_configs"]}
    assert jobs["broker"] == ("/metrics", [f"broker-{i}:9100" for i in range(1, 6)])
    assert jobs["healthchecker"] == ("/metrics", ["healthchecker-1:9100", "healthchecker-2:9100"])
    assert jobs["query-service"] == ("/metrics", ["query-service:9100"])
    assert jobs["status"] == ("/metrics", ["status:8000"])
    assert jobs["spark-master"] == ("/metrics/master/prometheus", ["spark-master:8080"])
    assert jobs["spark-worker"] == ("/metrics/prometheus",
                                    [f"spark-worker-{i}:8081" for i in range(1, 4)])
    assert config["rule_files"] == ["/app/compose/prometheus/alerts.yml"]
    assert prometheus["ports"] == [
        "${FLIGHTS_PUBLISH_HOST:-127.0.0.1}:${FLIGHTS_PROMETHEUS_PORT:-9090}:9090"]
    assert "prometheus-data:/var/lib/flights" in prometheus["volumes"]
    link = ("--link=Prometheus (metrics, alerts)="
            "http://127.0.0.1:${FLIGHTS_PROMETHEUS_PORT:-9090}/alerts")
    assert link in services["status"]["command"]
    for daemon in ("spark-master", "spark-worker-1"):
        assert "sink.prometheusServlet.class" in services[daemon]["environment"][
            "SPARK_DAEMON_JAVA_OPTS"]


def test_health_checkers_start_after_the_servers_and_before_the_clients():
    services = _services(render(DeploymentShape(spark_workers=3, clients=2)))
    checkers = {f"healthchecker-{i}" for i in (1, 2, 3)}
    servers = {n for n in services
               if n not in checkers and not n.startswith(("client-", "datagen"))}
    probed = {"spark-master", "spark-worker-1", "spark-worker-2", "spark-worker-3",
              "broker-1", "broker-2", "broker-3"}
    for name in checkers:
        depends_on = services[name]["depends_on"]
        assert set(depends_on) == servers
        # An order, never a gate on health: a fault at start-up must not abort `up`.
        assert {c["condition"] for c in depends_on.values()} == {"service_started"}
        assert probed <= set(depends_on)
        assert "/var/run/docker.sock:/var/run/docker.sock" in services[name]["volumes"]
    for name in ("client-1", "client-2"):
        assert checkers <= set(services[name]["depends_on"])


def test_rows_and_seed_reach_the_data_generator():
    command = _services(render(DeploymentShape(rows=12345, seed=7)))["datagen"]["command"][-1]
    assert "--rows 12345 --seed 7 --out /data" in command


@pytest.mark.parametrize("field, value", [("brokers", 2), ("brokers", 4), ("brokers", 0),
                                          ("brokers", -1), ("brokers", 11),
                                          ("healthcheckers", 0), ("spark_workers", 0),
                                          ("rows", 0), ("clients", -1)])
def test_shapes_outside_the_bounds_are_refused(field, value):
    with pytest.raises(DeploymentShapeError, match=field):
        DeploymentShape(**{field: value}).check()


def test_questions_take_defaults_on_enter_and_ask_again_after_a_bad_answer():
    answers = iter(["", "x", "4", "", "2", "50_000"])
    out = io.StringIO()
    shape = ask(read=lambda prompt: next(answers), out=out)
    assert shape == DeploymentShape(brokers=3, healthcheckers=4, spark_workers=2,
                                    clients=2, rows=50_000)
    assert "'x' is not a whole number" in out.getvalue()


def test_an_even_number_of_brokers_is_asked_again():
    answers = iter(["2", "5", "", "", "", ""])
    prompts = []
    out = io.StringIO()

    def read(prompt):
        prompts.append(prompt)
        return next(answers)

    shape = ask(read=read, out=out)
    assert shape == DeploymentShape(brokers=5)
    assert prompts[0].startswith("brokers") and prompts[0] == prompts[1]
    assert "brokers must be odd" in out.getvalue()


def test_flags_write_the_file_and_no_flags_without_terminal_mean_defaults(tmp_path):
    out = tmp_path / "deep" / "compose.yaml"
    assert compose_generator.main(["--healthcheckers", "5", "--out", str(out)]) == 0
    assert "healthchecker-5" in _services(out.read_text())
    args = compose_generator.build_parser().parse_args([])
    assert compose_generator.shape_from_args(args, interactive=False) == DeploymentShape()


def test_refused_shape_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        compose_generator.main(["--brokers", "2", "--out", str(tmp_path / "c.yaml")])
    assert exited.value.code == 2
    assert "brokers must be odd" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()


def test_the_default_is_a_cluster_of_three_brokers():
    assert DeploymentShape().brokers == 3
    services = _services(DEV_FILE.read_text())
    assert {f"broker-{i}" for i in (1, 2, 3)} <= set(services) and "broker-4" not in services


def _flag(command: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in command if a.startswith(f"--{name}=")]
    assert len(values) <= 1, (name, command)
    return values[0] if values else None


@pytest.mark.parametrize("brokers", [1, 3, 5])
def test_brokers_form_one_cluster_each_naming_the_others(brokers):
    document = yaml.safe_load(render(DeploymentShape(brokers=brokers, clients=2).check()))
    services = document["services"]
    names = [f"broker-{i}" for i in range(1, brokers + 1)]
    assert [n for n in services if n.startswith("broker-")] == names
    bootstrap = ",".join(f"{name}:9092" for name in names)
    for i, name in enumerate(names, start=1):
        command = services[name]["command"]
        assert command[:3] == ["python", "-m", "services.broker"]
        assert _flag(command, "node-id") == str(i)
        assert _flag(command, "listen") == "0.0.0.0:9092"
        assert _flag(command, "advertise") == f"{name}:9092"
        assert _flag(command, "data-dir") == "/var/lib/flights/kaska"
        assert _flag(command, "heartbeat-targets") == \
            "healthchecker-1:9500,healthchecker-2:9500,healthchecker-3:9500"
        peers = _flag(command, "peers")
        if brokers == 1:
            assert peers is None  # a cluster of one
        else:
            assert peers.split(",") == [f"{j}@broker-{j}:9092"
                                        for j in range(1, brokers + 1) if j != i]
        assert services[name]["volumes"] == [f"{name}-data:/var/lib/flights"]
        assert services[name]["labels"]["flights.service"] == name
        assert services[name]["labels"]["flights.supervised"] == "true"
        assert "healthcheck" in services[name]
        assert "depends_on" not in services[name]  # brokers start together and elect
    volumes = document["volumes"]
    assert [v for v in volumes if v.startswith("broker-")] == [f"{n}-data" for n in names]
    assert _flag(services["query-service"]["command"], "brokers") == bootstrap
    for client in ("client-1", "client-2"):
        assert f"--brokers {bootstrap} " in services[client]["command"][-1]
    for dependent in ("query-service", "client-1", "client-2", "healthchecker-1"):
        depends_on = services[dependent]["depends_on"]
        assert all(depends_on[name]["condition"] == "service_started" for name in names)
        assert not any(n.startswith("broker-") and n not in names for n in depends_on)


@pytest.mark.parametrize("brokers", [2, 4])
def test_an_even_number_of_brokers_is_refused_with_a_reason(brokers):
    with pytest.raises(DeploymentShapeError, match=f"brokers must be odd.*got {brokers}"):
        DeploymentShape(brokers=brokers).check()


def test_brokers_checkers_and_query_service_serve_prometheus_metrics():
    services = _services(render(DeploymentShape()))
    exporters = {name for name, service in services.items()
                 if "--metrics-listen=0.0.0.0:9100" in service["command"]}
    assert exporters == {"broker-1", "broker-2", "broker-3", "healthchecker-1",
                         "healthchecker-2", "healthchecker-3", "query-service"}


def test_the_cluster_secret_travels_in_the_environment_never_on_a_command_line():
    services = _services(render(DeploymentShape(brokers=3, healthcheckers=3, clients=2)))
    signers = [name for name, service in services.items()
               if any("heartbeat-targets" in part for part in service["command"])
               or name.startswith("healthchecker-")]
    assert {"broker-1", "broker-3", "query-service", "status", "client-2",
            "healthchecker-2"} <= set(signers)
    for name in signers:
        secret = services[name]["environment"]["FLIGHTS_CLUSTER_SECRET"]
        # Required: compose refuses to start without it, no development default baked in.
        assert secret.startswith("${FLIGHTS_CLUSTER_SECRET:?"), name
    for name, service in services.items():
        command = " ".join(service["command"])
        assert "--secret" not in command and "SECRET" not in command, name


def test_every_long_running_service_counts_an_early_sigterm_as_a_clean_stop():
    # A SIGTERM before the service's own handler (the status service once exited 143
    # when `down` came in its first ~0.3 s) ends it with 143, which tini -e 143 maps to 0.
    services = _services(render(DeploymentShape(spark_workers=2, clients=2)))
    for name, service in services.items():
        if name.startswith(("client-", "datagen")):
            assert "entrypoint" not in service, name  # the clients' exit codes mean something
        else:
            assert service["entrypoint"] == ["/usr/bin/tini", "-e", "143", "--"], name


def test_the_checkers_give_the_jvms_the_compose_start_deadline():
    services = _services(render(DeploymentShape()))
    command = services["healthchecker-1"]["command"]
    assert "--start-deadline=spark-*=240" in command
    assert "--start-deadline=query-service*=240" in command


def _as_compose_reads(text: str, environment: dict[str, str]) -> str:
    """`${NAME:-default}` substituted the way Compose does (the rendering uses no other form
    in the lines these tests read)."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}",
                  lambda match: environment.get(match[1], match[2]), text)


@pytest.mark.parametrize("environment", [{}, {"FLIGHTS_KAFKA_PORT_2": "29001",
                                              "FLIGHTS_KAFKA_ADVERTISE_HOST": "10.1.2.3",
                                              "FLIGHTS_PUBLISH_HOST": "0.0.0.0"}])
def test_each_brokers_kafka_listener_is_published_where_every_broker_advertises_it(environment):
    """EXTERNAL: published on the host and advertised there; INTERNAL: the service name inside
    the network, never published; every broker names every other on both."""
    published = PublishedPorts(kafka_port_base=30000).check()
    text = render(DeploymentShape(brokers=5).check(), published=published)
    services = _services(_as_compose_reads(text, environment))
    advertise_host = environment.get("FLIGHTS_KAFKA_ADVERTISE_HOST", "127.0.0.1")
    publish_host = environment.get("FLIGHTS_PUBLISH_HOST", "127.0.0.1")
    host_port = {i: int(environment.get(f"FLIGHTS_KAFKA_PORT_{i}", 30000 + i - 1))
                 for i in range(1, 6)}
    external = {i: f"EXTERNAL://{advertise_host}:{host_port[i]}" for i in range(1, 6)}
    internal = {i: f"INTERNAL://broker-{i}:19092" for i in range(1, 6)}
    for i in range(1, 6):
        service = services[f"broker-{i}"]
        args = parse_args(service["command"][3:])  # after "python -m services.broker"
        kafka = config_from_args(args, secret=b"s").kafka  # every flag checked, as at start
        assert [str(listener) for listener in kafka.listeners] == [
            "INTERNAL://0.0.0.0:19092", "EXTERNAL://0.0.0.0:29092"]
        assert [str(listener) for listener in kafka.advertised_listeners] == [
            internal[i], external[i]]
        assert dict(kafka.security_protocol_map) == {"INTERNAL": "PLAINTEXT",
                                                      "EXTERNAL": "PLAINTEXT"}
        assert [str(peer) for peer in kafka.peers] == [
            f"{j}@{address[j]}" for j in range(1, 6) if j != i for address in (internal,
                                                                                external)]
        assert service["ports"] == [f"{publish_host}:{host_port[i]}:29092"]


def test_a_kafka_port_range_over_another_published_port_is_refused():
    with pytest.raises(PublishedPortsError, match="Kafka ports take 7995..8003"):
        PublishedPorts(kafka_port_base=7995).check()
    with pytest.raises(PublishedPortsError, match=r"must lie in \[1, 65535\]"):
        PublishedPorts(kafka_port_base=65530).check()
    PublishedPorts(kafka_port_base=8001).check()  # 8001..8009 misses 8000, 8080 and 4040
