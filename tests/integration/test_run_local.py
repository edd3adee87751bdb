"""`run_local` end to end: three brokers (one replicated cluster), query service (Spark
local[2]), three health checkers and the clients as local processes; results compared with the
reference of docs/queries.md."""

import time

import pytest

from client.resume import SessionCheckpoint
from healthchecker.local_registry import LocalServiceRegistry
from tests.integration.run_local_helpers import (
    assert_results_match_reference,
    dirty_copy,
    generated,
    start_run_local,
    summary_of,
)

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 600


def test_broker_killed_mid_upload_results_still_exact(tmp_path):
    data = generated(tmp_path / "data", rows=60_000, seed=33)
    flights = dirty_copy(data.flights_path, tmp_path / "dirty.csv")
    results = tmp_path / "results"
    process = start_run_local(results, tmp_path / "out.txt", "--flights", str(flights),
                              "--airports", str(data.airports_path), "--batch-rows", "20")
    try:
        state = wait_for_upload_progress(results, messages_min=50)
        killed_pid = LocalServiceRegistry(results / "run" / "registry").kill("broker-1")
        state = SessionCheckpoint(results / "state", state["client_id"]).store.load_json()
        assert killed_pid is not None
        assert state["session_ended"] is None, "the kill came after the upload"
        code = process.wait(RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(60)
    output = (tmp_path / "out.txt").read_text(errors="replace")
    assert code == 0, output[-5000:]
    assert_results_match_reference(results, data.flights_path, data.airports_path)
    summary = summary_of(results)
    assert summary["rows_rejected"]["flights"] == {
        "wrong_field_count": data.invalid_rows["short_row"] + 1, "undecodable_bytes": 1}
    checker_logs = "".join(p.read_text() for p in (results / "run" / "logs").glob("health*"))
    assert "RESTARTED service=broker-1" in checker_logs


def wait_for_upload_progress(results, messages_min: int, timeout_s: float = 300) -> dict:
    """The client's checkpoint once it has at least `messages_min` flights messages acked."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in (results / "state").glob("session-*.current"):
            client_id = path.name.removeprefix("session-").removesuffix(".current")
            state = SessionCheckpoint(results / "state", client_id).store.load_json()
            if state["files"]["flights"]["messages_acked"] >= messages_min:
                return state
        time.sleep(0.02)
    raise AssertionError(f"no upload progress within {timeout_s} s")
