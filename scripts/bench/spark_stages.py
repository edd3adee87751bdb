"""Where the query service's JVM spends a session: Spark's own per-stage CPU, from its UI's REST
API (`/api/v1`), for the benchmark's profile (py-spy samples only the Python processes).

A session's jobs carry the job group `session-<client id>` (spark/service/session_job.py); each
job's stages report `executorCpuTime` (ns: the tasks' CPU, the JVM's share of the work: reading the
Python workers' Arrow batches into rows, expressions, joins, the cache, shuffles) and
`executorRunTime` (ms: the tasks' wall time, including waiting for the Python workers). Stages
are grouped by their name, which is the Python call site that started the job
(`toLocalIterator at .../session_job.py:138`), so the lines say which step of the job cost what.

Pure reads over HTTP from 127.0.0.1; raises SparkStagesError when the UI does not answer or
answers something else than the REST API's documents.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from scripts.bench.errors import BenchError

HTTP_TIMEOUT_S = 10.0
NS_PER_S, MS_PER_S = 1e9, 1e3


class SparkStagesError(BenchError):
    """The Spark UI did not answer, or not with the REST API's documents."""


@dataclass(frozen=True)
class StageCost:
    name: str  # the call site that started the stage's job
    stages: int
    tasks: int
    cpu_s: float
    run_s: float
    input_records: int


def _get(ui_url: str, path: str):
    url = ui_url.rstrip("/") + "/api/v1" + path
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as error:
        raise SparkStagesError(f"Spark UI {url}: {error}") from error


def session_stage_costs(ui_url: str, job_group: str) -> list[StageCost]:
    """The completed stages of the jobs in `job_group`, summed by name, costliest first."""
    applications = _get(ui_url, "/applications")
    if not applications:
        raise SparkStagesError(f"Spark UI {ui_url}: no application")
    app = applications[0]["id"]
    stage_ids = {stage for job in _get(ui_url, f"/applications/{app}/jobs")
                 if job.get("jobGroup") == job_group for stage in job.get("stageIds", [])}
    costs: dict[str, dict] = {}
    for stage in _get(ui_url, f"/applications/{app}/stages?status=complete"):
        if stage["stageId"] not in stage_ids:
            continue
        cost = costs.setdefault(stage["name"], {"stages": 0, "tasks": 0, "cpu_ns": 0,
                                                "run_ms": 0, "input_records": 0})
        cost["stages"] += 1
        cost["tasks"] += stage.get("numCompleteTasks", 0)
        cost["cpu_ns"] += stage.get("executorCpuTime", 0)
        cost["run_ms"] += stage.get("executorRunTime", 0)
        cost["input_records"] += stage.get("inputRecords", 0)
    found = [StageCost(name, c["stages"], c["tasks"], round(c["cpu_ns"] / NS_PER_S, 2),
                       round(c["run_ms"] / MS_PER_S, 2), c["input_records"])
             for name, c in costs.items()]
    return sorted(found, key=lambda cost: -cost.cpu_s)


def format_stage_costs(costs: list[StageCost]) -> list[str]:
    lines = [f"  {'JVM CPU-s':>9} {'task s':>8} {'stages':>6} {'tasks':>6}  call site"]
    for cost in costs:
        lines.append(f"  {cost.cpu_s:>9.2f} {cost.run_s:>8.2f} {cost.stages:>6} "
                     f"{cost.tasks:>6}  {cost.name}")
    total_cpu = sum(cost.cpu_s for cost in costs)
    total_run = sum(cost.run_s for cost in costs)
    lines.append(f"  {total_cpu:>9.2f} {total_run:>8.2f}  all stages of the session's jobs")
    return lines
