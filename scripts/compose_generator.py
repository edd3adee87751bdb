"""Renders the Compose deployment from compose/docker-compose.yaml.j2.

    python -m scripts.compose_generator --brokers 3 --healthcheckers 3 --spark-workers 2 \\
        --clients 1 --rows 200000 [--seed 1] [--out compose/generated/docker-compose.yaml]

Run with no flags at a terminal, it asks for each count (Enter keeps the default shown); with
no flags and no terminal it renders the defaults. The default rendering is committed as
compose/docker-compose-dev.yaml; a unit test re-renders it and fails when the two differ, so
after editing the template run `python -m scripts.compose_generator --defaults --out
compose/docker-compose-dev.yaml`.

Brokers: one replicated Kaska cluster (docs/replication.md) of an odd number of brokers,
broker-1..broker-N, each with its own named volume and `--peers` naming the others; the query
service and the clients get all of them as their bootstrap list. N brokers survive (N-1)/2
failures, so an even N (one more broker, no more tolerance) is refused, as are N < 1 and
N > `BROKERS_MAX`.

Published on the host (everything else stays inside the Compose network): the live status page
(`services/status`), the Spark master's web UI, the query service's driver UI, Prometheus
(compose/prometheus/: it scrapes every service and holds the alert rules) and each broker's
EXTERNAL Kafka listener (docs/kafka.md; its INTERNAL one serves the Compose network), bound to
`--publish-host` (default 127.0.0.1: this machine only) on `--status-port` (8000),
`--spark-master-ui-port` (8080), `--spark-driver-ui-port` (4040), `--prometheus-port` (9090)
and `--kafka-port-base` + i - 1 for broker-i (19092, 19093, ...).
These are the defaults of the variables FLIGHTS_PUBLISH_HOST, FLIGHTS_STATUS_PORT,
FLIGHTS_SPARK_MASTER_UI_PORT, FLIGHTS_SPARK_DRIVER_UI_PORT, FLIGHTS_PROMETHEUS_PORT and
FLIGHTS_KAFKA_PORT_<i>, so one rendering can also run beside another deployment.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from scripts.deploy.compose_file import (
    OUT_DEFAULT,
    REPO,
    DeploymentShape,
    DeploymentShapeError,
    PublishedPorts,
    PublishedPortsError,
    ask,
    write,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.compose_generator",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in fields(DeploymentShape):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=None,
                            help=f"default {field.default}")
    defaults = PublishedPorts()
    parser.add_argument("--publish-host", default=defaults.host,
                        help=f"host address the status page and Spark UIs are published on "
                             f"(default {defaults.host}; 0.0.0.0: every interface)")
    for name, what in (("status_port", "the status page"),
                       ("spark_master_ui_port", "the Spark master's web UI"),
                       ("spark_driver_ui_port", "the query service's Spark UI"),
                       ("prometheus_port", "Prometheus's UI and HTTP API"),
                       ("kafka_port_base", "broker-1's EXTERNAL Kafka listener (broker-i: +i-1)")):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int,
                            default=getattr(defaults, name),
                            help=f"host port of {what} (default {getattr(defaults, name)})")
    parser.add_argument("--defaults", action="store_true",
                        help="no questions: defaults for every count not given")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT,
                        help=f"default {OUT_DEFAULT.relative_to(REPO)}")
    return parser


def shape_from_args(args: argparse.Namespace, interactive: bool) -> DeploymentShape:
    given = {f.name: getattr(args, f.name) for f in fields(DeploymentShape)
             if getattr(args, f.name) is not None}
    if not given and not args.defaults and interactive:
        return ask()
    return DeploymentShape(**given)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        shape = shape_from_args(args, interactive=sys.stdin.isatty()).check()
        published = PublishedPorts(args.publish_host, args.status_port,
                                   args.spark_master_ui_port, args.spark_driver_ui_port,
                                   args.kafka_port_base, args.prometheus_port).check()
        out = write(shape, args.out, published)
    except (DeploymentShapeError, PublishedPortsError, EOFError) as error:
        parser.error(str(error) or "no answer")
    print(f"wrote {out}: {shape.brokers} broker(s), {shape.healthcheckers} health checkers, "
          f"{shape.spark_workers} Spark worker(s), {shape.clients} client(s), {shape.rows} rows; "
          f"status page on http://{published.browse_host}:{published.status_port}/, Prometheus "
          f"on http://{published.browse_host}:{published.prometheus_port}/, Kafka "
          f"bootstrap {published.browse_host}:{published.kafka_port(1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
