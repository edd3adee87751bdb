"""The deployment run like a team would: Prometheus scrapes every service and has its rules
loaded (on the suite's shared deployment); on a small deployment of its own (the brokers and
Prometheus, the health checkers when a test adds them; no JVM), a killed broker fires
`ServiceDown` until the health checkers heal it, a SIGSTOPped broker turns `unhealthy` in
Docker's health status, and `down` then `up` keeps a topic's records (the named volumes stay)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest
import yaml

from scripts.deploy.compose_file import COMPOSE_DIR
from scripts.deploy.deployment import rendered_checkers
from tests.e2e.conftest import fresh_deployment
from tests.e2e.test_compose_kafka import cluster_metadata, kcat
from tests.integration.kafka.clients import create_topic, produce

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

RULES = COMPOSE_DIR / "prometheus" / "alerts.yml"
HTTP_TIMEOUT_S = 5
# The shared deployment's JVMs start beside everything else; on a loaded 2-core machine a
# Spark daemon has taken minutes to answer.
TARGETS_UP_TIMEOUT_S = 480
READY_TIMEOUT_S = 180
# Docker's health: a probe every 15 s, `unhealthy` after 3 failures in a row (the template).
UNHEALTHY_TIMEOUT_S = 150
# ServiceDown's `for:` is 15 s, scrapes and evaluations every 5 s.
ALERT_TIMEOUT_S = 120
HEAL_TIMEOUT_S = 180
RECORDS = 200


def prometheus_api(deployment, path: str) -> dict | None:
    """The `data` of a Prometheus HTTP API answer, None while it does not answer."""
    try:
        with urllib.request.urlopen(deployment.prometheus_url + path,
                                    timeout=HTTP_TIMEOUT_S) as answer:
            body = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return body["data"] if body.get("status") == "success" else None


def alerts(deployment, name: str, **labels: str) -> list[dict] | None:
    """Prometheus's pending and firing `name` alerts with these labels; None while it does not
    answer."""
    data = prometheus_api(deployment, "api/v1/alerts")
    if data is None:
        return None
    return [alert for alert in data["alerts"] if alert["labels"].get("alertname") == name
            and all(alert["labels"].get(key) == value for key, value in labels.items())]


def target_health(deployment) -> dict[tuple[str, str], str]:
    """(job, instance) -> up / down / unknown, for every active scrape target."""
    data = prometheus_api(deployment, "api/v1/targets") or {"activeTargets": []}
    return {(target["labels"]["job"], target["labels"]["instance"]): target["health"]
            for target in data["activeTargets"]}


def docker_health(deployment, service: str) -> str | None:
    return deployment.container(service).attrs["State"].get("Health", {}).get("Status")


def test_prometheus_scrapes_every_service_up_with_its_rules_loaded(shared_deployment):
    deployment = shared_deployment
    names = deployment.containers()
    expected = {("prometheus", "localhost:9090"), ("query-service", "query-service:9100"),
                ("status", "status:8000"), ("spark-master", "spark-master:8080")}
    expected |= {("broker", f"broker-{i}:9100") for i in deployment.brokers}
    expected |= {("healthchecker", f"{name}:9100") for name in rendered_checkers(
        deployment.compose_file)}
    expected |= {("spark-worker", f"{name}:8081") for name in names
                 if name.startswith("spark-worker-")}

    def every_target_up():
        health = target_health(deployment)
        return set(health) == expected and set(health.values()) == {"up"}

    deployment.wait_for(f"every scrape target up: {sorted(expected)} (have "
                        f"{target_health(deployment)})", every_target_up, TARGETS_UP_TIMEOUT_S)

    groups = yaml.safe_load(RULES.read_text())["groups"]
    written = {rule.get("alert") or rule["record"] for group in groups for rule in group["rules"]}

    def rules_loaded_and_evaluated():
        data = prometheus_api(deployment, "api/v1/rules")
        rules = [rule for group in (data or {"groups": []})["groups"]
                 for rule in group["rules"]]
        return ({rule["name"] for rule in rules} == written
                and all(rule["health"] == "ok" for rule in rules))

    deployment.wait_for("every rule of alerts.yml loaded and evaluated without error",
                        rules_loaded_and_evaluated, READY_TIMEOUT_S)
    # A link to it on the status page (the page renders the --link flags).
    assert any(argument.startswith("--link=Prometheus") for argument in
               deployment.container("status").attrs["Config"]["Cmd"])


@pytest.fixture(scope="module")
def small_deployment(project_image, e2e_data, tmp_path_factory):
    """The brokers and Prometheus alone (`up --no-deps`): no JVM, no health checkers until a
    test starts them, so a fault a test injects stays until the test lets it be healed."""
    with fresh_deployment(project_image, e2e_data,
                          tmp_path_factory.mktemp("small") / "results") as made:
        made.up(*(f"broker-{i}" for i in made.brokers), "prometheus")
        yield made
        # Its volumes too when a test left it down with them kept (fresh_deployment takes
        # down only a deployment with containers).
        made.down()


def test_a_sigstopped_broker_turns_unhealthy_in_docker_health_status(small_deployment):
    deployment = small_deployment
    deployment.wait_for("broker-1 healthy", lambda: docker_health(deployment, "broker-1")
                        == "healthy", READY_TIMEOUT_S)
    broker = deployment.container("broker-1")
    signal_broker = "kill -{} $(pgrep -f '^python -m services[.]broker')"
    stopped = broker.exec_run(["sh", "-c", signal_broker.format("STOP")])
    assert stopped.exit_code == 0, stopped.output
    try:
        # The process still holds its port (its kernel accepts connections): only a probe
        # with a deadline tells it from a live one.
        deployment.wait_for("broker-1 unhealthy", lambda: docker_health(deployment, "broker-1")
                            == "unhealthy", UNHEALTHY_TIMEOUT_S)
        assert deployment.container("broker-1").status == "running"
    finally:
        resumed = broker.exec_run(["sh", "-c", signal_broker.format("CONT")])
    assert resumed.exit_code == 0, resumed.output
    deployment.wait_for("broker-1 healthy again", lambda: docker_health(deployment, "broker-1")
                        == "healthy", UNHEALTHY_TIMEOUT_S)


def test_a_killed_broker_fires_service_down_until_the_health_checkers_heal_it(
        small_deployment):
    deployment = small_deployment
    instance = "broker-2:9100"
    deployment.wait_for(f"{instance} scraped up",
                        lambda: target_health(deployment).get(("broker", instance)) == "up",
                        READY_TIMEOUT_S)
    assert alerts(deployment, "ServiceDown", instance=instance) == []
    deployment.kill("broker-2")
    deployment.wait_for(
        "ServiceDown firing for broker-2",
        lambda: any(alert["state"] == "firing"
                    for alert in alerts(deployment, "ServiceDown", instance=instance) or []),
        ALERT_TIMEOUT_S)
    # Only now the health checkers: they find broker-2 killed (exit 137) and restart it.
    checkers = rendered_checkers(deployment.compose_file)
    deployment.up(*checkers)
    deployment.wait_for("broker-2 restarted by a health checker",
                        lambda: any(restart.service == "broker-2"
                                    for restart in deployment.restarts()), HEAL_TIMEOUT_S)
    deployment.wait_for("ServiceDown for broker-2 cleared",
                        lambda: alerts(deployment, "ServiceDown", instance=instance) == [],
                        ALERT_TIMEOUT_S)
    assert target_health(deployment)[("broker", instance)] == "up"


def test_down_then_up_keeps_the_brokers_data(small_deployment):
    deployment = small_deployment
    bootstrap = deployment.kafka_bootstrap.split(",")[0]
    deployment.wait_for("the brokers' Kafka Metadata with a controller",
                        lambda: cluster_metadata(bootstrap), READY_TIMEOUT_S)
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    records = [(0, f"k{index}".encode(), f"v{index}".encode()) for index in range(RECORDS)]
    assert len(set(produce(bootstrap, topic, records))) == RECORDS  # acks=all

    deployment.down_keeping_volumes()
    assert deployment.containers() == {}
    deployment.up(*(f"broker-{i}" for i in deployment.brokers))
    deployment.wait_for("the brokers' Kafka Metadata with a controller after up",
                        lambda: cluster_metadata(bootstrap), READY_TIMEOUT_S)
    lines = kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                 "-c", str(RECORDS), "-f", "%k %s\\n").splitlines()
    assert lines == [f"k{index} v{index}" for index in range(RECORDS)]
