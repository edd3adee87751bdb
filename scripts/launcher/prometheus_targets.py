"""The embedded default's scrape targets for a local Prometheus, as a file_sd JSON file
(Prometheus' `file_sd_configs`): `run_local --prometheus-targets FILE` writes it once the
platform listens.

Format: a JSON list of target groups, one per process: `{"targets": ["127.0.0.1:PORT"],
"labels": {"job": JOB, "service": NAME}}`, JOB one of `JOBS` (the brokers, the health checkers,
the query service: every process that serves /metrics), NAME the process' registry name
(broker-1, healthchecker-2, query-service), so an alert names the process, not a port. Each
target also answers /healthz (common/metrics_http.py).

A Prometheus reading it:
    scrape_configs:
      - job_name: flights
        file_sd_configs: [{files: [FILE]}]
(the `job` label of each group overrides the job name).

Written whole, then renamed over FILE: Prometheus re-reads a watched file when it changes
and must never see half of one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

BROKER_JOB = "kaska-broker"
CHECKER_JOB = "healthchecker"
SERVICE_JOB = "query-service"
JOBS = (BROKER_JOB, CHECKER_JOB, SERVICE_JOB)
LOCALHOST = "127.0.0.1"


def target_groups(targets: Iterable[tuple[str, str, int]]) -> list[dict]:
    """(job, service name, metrics port) -> file_sd target groups, in the given order."""
    return [{"targets": [f"{LOCALHOST}:{port}"], "labels": {"job": job, "service": name}}
            for job, name, port in targets]


def write_targets_file(path: Path, groups: list[dict]) -> None:
    """`groups` as JSON in `path`, replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(groups, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)
