"""The benchmark's JVM profile (scripts/bench/spark_stages.py): a session's stages, read from a
Spark UI's REST API (here a stand-in HTTP server on 127.0.0.1 answering recorded documents),
summed by call site, other sessions' stages left out."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scripts.bench.spark_stages import (
    SparkStagesError,
    format_stage_costs,
    session_stage_costs,
)

APP = "local-1795672657"
DOCUMENTS = {
    "/api/v1/applications": [{"id": APP, "name": "query-service"}],
    f"/api/v1/applications/{APP}/jobs": [
        {"jobId": 0, "jobGroup": "session-a", "stageIds": [0, 1]},
        {"jobId": 1, "jobGroup": "session-a", "stageIds": [2]},
        {"jobId": 2, "jobGroup": "session-b", "stageIds": [3]},
        {"jobId": 3, "stageIds": [4]},  # the warm-up: no group
    ],
    f"/api/v1/applications/{APP}/stages?status=complete": [
        {"stageId": 0, "name": "first at queries.py:300", "numCompleteTasks": 5,
         "executorCpuTime": 2_500_000_000, "executorRunTime": 4000, "inputRecords": 100},
        {"stageId": 1, "name": "toLocalIterator at session_job.py:138", "numCompleteTasks": 4,
         "executorCpuTime": 1_000_000_000, "executorRunTime": 1500, "inputRecords": 0},
        {"stageId": 2, "name": "toLocalIterator at session_job.py:138", "numCompleteTasks": 4,
         "executorCpuTime": 4_000_000_000, "executorRunTime": 4500, "inputRecords": 0},
        {"stageId": 3, "name": "first at queries.py:300", "numCompleteTasks": 5,
         "executorCpuTime": 9_000_000_000, "executorRunTime": 9000, "inputRecords": 7},
        {"stageId": 4, "name": "collect at warm_up.py:80", "numCompleteTasks": 1,
         "executorCpuTime": 7_000_000_000, "executorRunTime": 7000, "inputRecords": 7},
    ],
}


class _Handler(BaseHTTPRequestHandler):
    documents: dict = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        document = self.documents.get(self.path)
        body = b"not json" if document is None else json.dumps(document).encode()
        self.send_response(200 if document is not None else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def spark_ui():
    def serve(documents: dict) -> str:
        handler = type("Handler", (_Handler,), {"documents": documents})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}/"

    servers: list[ThreadingHTTPServer] = []
    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_sessions_stages_are_summed_by_call_site_costliest_first(spark_ui):
    costs = session_stage_costs(spark_ui(DOCUMENTS), "session-a")
    assert [(c.name, c.stages, c.tasks, c.cpu_s, c.run_s, c.input_records) for c in costs] == [
        ("toLocalIterator at session_job.py:138", 2, 8, 5.0, 6.0, 0),
        ("first at queries.py:300", 1, 5, 2.5, 4.0, 100),
    ]
    lines = format_stage_costs(costs)
    assert lines[-1].split()[:2] == ["7.50", "10.00"]


def test_a_group_without_jobs_has_no_stages(spark_ui):
    assert session_stage_costs(spark_ui(DOCUMENTS), "session-unknown") == []


def test_a_ui_that_answers_no_application_or_no_document_is_a_named_error(spark_ui):
    with pytest.raises(SparkStagesError, match="no application"):
        session_stage_costs(spark_ui({"/api/v1/applications": []}), "session-a")
    with pytest.raises(SparkStagesError, match="jobs"):
        session_stage_costs(spark_ui({"/api/v1/applications": [{"id": APP}]}), "session-a")
