"""The Compose deployment's shape and its rendering: DeploymentShape (brokers, health checkers,
Spark workers, clients, rows) and PublishedPorts, checked; `render`/`write` fill
compose/docker-compose.yaml.j2 with them; `ask` gets a shape interactively.
`python -m scripts.compose_generator` is its command line (the flags, the defaults, the
committed default rendering compose/docker-compose-dev.yaml).

Invariants: a shape is checked before it is rendered (an odd broker count in 1..BROKERS_MAX,
every count within its bound), so a rendering never names a deployment that cannot run; a file
is written under a temporary name and renamed, never torn. The default shape rendered is
byte-equal to compose/docker-compose-dev.yaml (a unit test keeps the two in step).
Threads: none.
"""


from __future__ import annotations

import functools
import ipaddress
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import jinja2

from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE

REPO = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO / "compose"
TEMPLATE_NAME = "docker-compose.yaml.j2"
DEV_FILE = COMPOSE_DIR / "docker-compose-dev.yaml"
OUT_DEFAULT = COMPOSE_DIR / "generated" / "docker-compose.yaml"
PROJECT_DEFAULT = "flights-optimizer"
IMAGE_DEFAULT = "flights-optimizer:latest"
BROKERS_MAX = 9
HEALTHCHECKERS_MAX = 9
SPARK_WORKERS_MAX = 16
CLIENTS_MAX = 32
ROWS_MAX = 100_000_000
ASK_ATTEMPTS_MAX = 5

# Fixed ports inside the Compose network; `PublishedPorts` says which reach the host.
PORTS = {
    "broker": 9092,
    "healthchecker": 9500,  # election over UDP and heartbeats over TCP
    "spark_master": 7077,
    "spark_master_ui": 8080,
    "spark_worker": 7100,
    "spark_worker_ui": 8081,
    "spark_driver": 7078,
    "spark_block_manager": 7079,
    "metrics": 9100,  # Prometheus /metrics of the brokers, health checkers, query service
    "checker_status": 9101,  # the health checkers' signed status request (services/status)
    "status": 8000,  # the status page
    "spark_driver_ui": 4040,  # the query service's Spark UI
    "kafka": 19092,  # each broker's INTERNAL Kafka listener (docs/kafka.md), for this network
    "kafka_external": 29092,  # its EXTERNAL one, published for host clients as kafka_port(i)
    "prometheus": 9090,  # Prometheus's UI and HTTP API (compose/prometheus/)
}
PORT_MIN, PORT_MAX = 1, 65535
# One core each: the reference machine has two. The executor takes the worker's whole memory.
SPARK_WORKER_CORES = 1
SPARK_WORKER_MEMORY = "1g"
SPARK_EXECUTOR_MEMORY = "1g"
# How long the master waits for workers and applications to answer after a restart (its
# recovery), and how long a silent worker stays registered; Spark's default is 60 s.
SPARK_WORKER_TIMEOUT_S = 10
# The health checkers' start deadline for the JVM services in Compose (their built-in is 60 s):
# the JVMs start together with the whole deployment, with no health gate before the checkers.
# 120 s was not enough on a loaded machine: a restarted Spark master answered 140-152 s after its
# restart at load 35, and was killed at the deadline, each restart starting it over.
JVM_START_DEADLINE_S = 240
# The Spark master and workers only coordinate (the executors do the work): the client compiler
# alone and the serial collector are enough for them, and cost 4.3-4.5 CPU-seconds in a master's
# first 45 s against 6.8-8.3 with the JVM's defaults (measured side by side in the image), for
# the same 4-6 s to answer -- on a 2-core machine that also runs the executors and the driver.
SPARK_DAEMON_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Every container's json-file log is rotated at LOG_MAX_SIZE and keeps LOG_MAX_FILES files:
# at most 50 MB of logs a container, however long the deployment runs.
LOG_MAX_SIZE = "10m"
LOG_MAX_FILES = 5
# Prometheus (compose/prometheus/): how often it scrapes every target and evaluates its rules
# (alerts.yml's `for:` durations are a few of these), and how long it keeps samples.
PROMETHEUS_SCRAPE_INTERVAL_S = 5
PROMETHEUS_RETENTION = "7d"
# Where the project image holds the rules (.dockerignore lets compose/prometheus/ in).
PROMETHEUS_RULES_IN_IMAGE = "/app/compose/prometheus/alerts.yml"


class DeploymentShapeError(ValueError):
    """A count outside what the template and the platform support (or an even broker count)."""


class PublishedPortsError(ValueError):
    """A host address or host port the published services cannot be bound to."""


@dataclass(frozen=True)
class PublishedPorts:
    """Where the host reaches the status page, the Spark UIs, Prometheus and the brokers'
    EXTERNAL Kafka listeners (module doc). Broker i's is published on `kafka_port(i)`, and the
    broker advertises that very port on EXTERNAL in Kafka's Metadata: clients connect where it
    says."""

    host: str = "127.0.0.1"
    status_port: int = 8000
    spark_master_ui_port: int = 8080
    spark_driver_ui_port: int = 4040
    kafka_port_base: int = 19092  # broker i: kafka_port_base + i - 1
    prometheus_port: int = 9090

    def kafka_port(self, broker: int) -> int:
        return self.kafka_port_base + broker - 1

    def check(self) -> PublishedPorts:
        try:
            ipaddress.ip_address(self.host)
        except ValueError as error:
            raise PublishedPortsError(f"--publish-host must be an IP address, got "
                                      f"{self.host!r}") from error
        kafka_ports = tuple(self.kafka_port(i) for i in range(1, BROKERS_MAX + 1))
        ports = (self.status_port, self.spark_master_ui_port, self.spark_driver_ui_port,
                 self.prometheus_port, *kafka_ports)
        for port in ports:
            if not PORT_MIN <= port <= PORT_MAX:
                raise PublishedPortsError(f"host ports must lie in [{PORT_MIN}, {PORT_MAX}], "
                                          f"got {port}")
        if len(set(ports)) != len(ports):
            raise PublishedPortsError(
                f"the published host ports must differ (the Kafka ports take "
                f"{kafka_ports[0]}..{kafka_ports[-1]}, one per possible broker), got status "
                f"{self.status_port}, Spark UIs {self.spark_master_ui_port} and "
                f"{self.spark_driver_ui_port}, Prometheus {self.prometheus_port}")
        return self

    @property
    def browse_host(self) -> str:
        """Where a browser on this machine finds them (0.0.0.0 binds everywhere, 127.0.0.1
        reaches it)."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host


@dataclass(frozen=True)
class DeploymentShape:
    """How many of each service the rendering holds, and the sample data size."""

    brokers: int = 3  # odd: a majority must stay up
    healthcheckers: int = 3
    spark_workers: int = 2
    clients: int = 1
    rows: int = 200_000
    seed: int = 1

    def check(self) -> DeploymentShape:
        bounds = {
            "brokers": (1, BROKERS_MAX),
            "healthcheckers": (1, HEALTHCHECKERS_MAX),
            "spark_workers": (1, SPARK_WORKERS_MAX),
            "clients": (0, CLIENTS_MAX),
            "rows": (1, ROWS_MAX),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise DeploymentShapeError(f"{name} must lie in [{low}, {high}], got {value}")
        if self.brokers % 2 == 0:
            raise DeploymentShapeError(
                f"brokers must be odd (N brokers survive (N-1)/2 failures, so an even count adds "
                f"a broker but no tolerance), got {self.brokers}")
        return self


@functools.cache
def template_environment() -> jinja2.Environment:
    """One environment per process: it caches the compiled template."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(COMPOSE_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - YAML, not HTML
    )


def render(shape: DeploymentShape, environment: jinja2.Environment | None = None,
           published: PublishedPorts | None = None) -> str:
    """The Compose file for `shape` (unchecked: tests render shapes the generator refuses)."""
    environment = environment or template_environment()
    return environment.get_template(TEMPLATE_NAME).render(
        **asdict(shape),
        ports=PORTS,
        published=published or PublishedPorts(),
        project_default=PROJECT_DEFAULT,
        image_default=IMAGE_DEFAULT,
        flights_file=FLIGHTS_FILE,
        airports_file=AIRPORTS_FILE,
        spark_worker_cores=SPARK_WORKER_CORES,
        spark_worker_memory=SPARK_WORKER_MEMORY,
        spark_executor_memory=SPARK_EXECUTOR_MEMORY,
        spark_worker_timeout_s=SPARK_WORKER_TIMEOUT_S,
        jvm_start_deadline_s=JVM_START_DEADLINE_S,
        spark_daemon_jvm_opts=SPARK_DAEMON_JVM_OPTS,
        log_max_size=LOG_MAX_SIZE,
        log_max_files=LOG_MAX_FILES,
        prometheus_scrape_interval_s=PROMETHEUS_SCRAPE_INTERVAL_S,
        prometheus_retention=PROMETHEUS_RETENTION,
        prometheus_rules=PROMETHEUS_RULES_IN_IMAGE,
    )


def write(shape: DeploymentShape, out: Path, published: PublishedPorts | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text(render(shape.check(), published=(published or PublishedPorts()).check()))
    temporary.replace(out)
    return out


QUESTIONS = {
    "brokers": "brokers (odd: one replicated cluster, a majority must stay up)",
    "healthcheckers": "health checkers",
    "spark_workers": "Spark workers",
    "clients": "clients",
    "rows": "rows of sample data (generated when the data directory is empty)",
}


def ask(read: Callable[[str], str] = input, out=None) -> DeploymentShape:
    """Asks for each count, Enter keeping the default; re-asks (a few times) on bad answers."""
    out = out or sys.stdout
    answers: dict[str, int] = {}
    defaults = DeploymentShape()
    for name, question in QUESTIONS.items():
        answers[name] = _ask_one(name, f"{question} [{getattr(defaults, name)}]: ", read, out)
    return DeploymentShape(**answers)


def _ask_one(name: str, prompt: str, read: Callable[[str], str], out) -> int:
    default = getattr(DeploymentShape(), name)
    for _ in range(ASK_ATTEMPTS_MAX):
        answer = read(prompt).strip().replace("_", "")
        value = default if not answer else int(answer) if answer.isdigit() else None
        if value is None:
            print(f"  {answer!r} is not a whole number", file=out)
            continue
        try:
            DeploymentShape(**{name: value}).check()
        except DeploymentShapeError as error:
            print(f"  {error}", file=out)
            continue
        return value
    raise DeploymentShapeError(f"no valid answer for {name} after {ASK_ATTEMPTS_MAX} attempts")
