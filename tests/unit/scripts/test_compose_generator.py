"""The Compose generator: the committed default rendering is current, and shapes render right."""

import io

import pytest
import yaml

from scripts import compose_generator
from scripts.compose_generator import (
    DEV_FILE,
    DeploymentShape,
    DeploymentShapeError,
    render,
)


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
    assert probes == ["--probe=spark-master=spark-master:7077"] + [
        f"--probe=spark-worker-{i}=spark-worker-{i}:7100" for i in range(1, 5)]


def test_every_service_is_labelled_and_none_has_a_restart_policy():
    services = _services(render(DeploymentShape(clients=2)))
    for name, service in services.items():
        labels = service["labels"]
        assert labels["flights.service"] == name
        assert labels["flights.project"] == "${COMPOSE_PROJECT_NAME:-flights-optimizer}"
        assert labels["flights.supervised"] == ("false" if name == "datagen" else "true")
        assert "restart" not in service, name


def test_health_checkers_start_after_the_servers_and_before_the_clients():
    services = _services(render(DeploymentShape(spark_workers=3, clients=2)))
    checkers = {f"healthchecker-{i}" for i in (1, 2, 3)}
    servers = {n for n in services
               if n not in checkers and not n.startswith(("client-", "datagen"))}
    probed = {"spark-master", "spark-worker-1", "spark-worker-2", "spark-worker-3", "broker-1"}
    for name in checkers:
        depends_on = services[name]["depends_on"]
        assert set(depends_on) == servers
        assert {n for n, c in depends_on.items() if c["condition"] == "service_healthy"} == probed
        assert "/var/run/docker.sock:/var/run/docker.sock" in services[name]["volumes"]
    for name in ("client-1", "client-2"):
        assert checkers <= set(services[name]["depends_on"])


def test_rows_and_seed_reach_the_data_generator():
    command = _services(render(DeploymentShape(rows=12345, seed=7)))["datagen"]["command"][-1]
    assert "--rows 12345 --seed 7 --out /data" in command


@pytest.mark.parametrize("field, value", [("brokers", 2), ("healthcheckers", 0),
                                          ("spark_workers", 0), ("rows", 0), ("clients", -1)])
def test_shapes_outside_the_bounds_are_refused(field, value):
    with pytest.raises(DeploymentShapeError, match=field):
        DeploymentShape(**{field: value}).check()


def test_questions_take_defaults_on_enter_and_ask_again_after_a_bad_answer():
    answers = iter(["", "x", "4", "", "2", "50_000"])
    out = io.StringIO()
    shape = compose_generator.ask(read=lambda prompt: next(answers), out=out)
    assert shape == DeploymentShape(brokers=1, healthcheckers=4, spark_workers=2,
                                    clients=2, rows=50_000)
    assert "'x' is not a whole number" in out.getvalue()


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
    assert "no broker replication yet" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()
