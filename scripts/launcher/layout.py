"""Where a run keeps things, and what its services are called.

    RESULTS_DIR/run/registry/           the local service registry (healthchecker/local_registry.py)
    RESULTS_DIR/run/logs/<name>.log     every service's output
    RESULTS_DIR/run/broker-data/broker-<i>/   broker i's data (or DATA_DIR/broker-<i> when kept)
    RESULTS_DIR/run/healthchecker-<i>/  health checker i's checkpoints
    RESULTS_DIR/run/secret              the health checkers' election secret
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

CHECKER_PREFIX = "healthchecker-"
BROKER_PREFIX = "broker-"
SERVICE_NAME = "query-service"  # the name spark.service heartbeats under
STATUS_NAME = "status"  # the name services.status heartbeats under


def broker_name(node_id: int) -> str:
    """The name broker `node_id` heartbeats under (the broker's default) and is registered as."""
    return f"{BROKER_PREFIX}{node_id}"


def checker_name(node_id: int) -> str:
    return f"{CHECKER_PREFIX}{node_id}"


@dataclass
class RunLayout:
    """Where a run keeps things (all under the results directory unless told otherwise)."""

    results_dir: Path
    brokers_data_dir: Path  # one directory broker-<i> per broker inside
    keep_broker_data: bool

    @property
    def run_dir(self) -> Path:
        return self.results_dir / "run"

    @property
    def registry_dir(self) -> Path:
        return self.run_dir / "registry"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def broker_data_dir(self, node_id: int) -> Path:
        return self.brokers_data_dir / broker_name(node_id)

    def prepare(self) -> None:
        """A fresh registry (stale entries would be restarted) and fresh logs; fresh broker
        data too unless it is to be kept."""
        for stale in (self.registry_dir, self.logs_dir):
            shutil.rmtree(stale, ignore_errors=True)
        if not self.keep_broker_data:
            shutil.rmtree(self.brokers_data_dir, ignore_errors=True)
        self.logs_dir.mkdir(parents=True)
