"""Eight clients at once on the embedded default: each with its own data (different
sizes, malformed rows), started 1 s apart so later ones join sessions under way, one of them
SIGKILLed mid-upload and resumed by the health checkers. Every client's results are its own and
exact against the reference of docs/queries.md.

The scenario is checked before the outcome: the clients' upload pace is capped, so the first
client is still uploading when the others start on any machine, and the victim is killed once
its checkpoint shows acknowledged messages and no SessionEnded (the kill landed mid-upload).
"""

import re
import time

import pytest

from client.resume import SessionCheckpoint
from healthchecker.local_registry import LocalServiceRegistry
from tests.integration.run_local_helpers import (
    assert_results_match_reference,
    start_run_local,
    summary_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

CLIENT_ROWS = (40_000, 6_000, 16_000, 9_000, 30_000, 4_000, 20_000, 12_000)
VICTIM = "client-5"
BATCH_ROWS = 200  # 150 messages for the victim: a kill lands between two of them
PACE_ROWS_PER_S = 4_000  # the first client uploads >= 10 s: the others join it
START_INTERVAL_S = 1.0
VICTIM_ACKED_MIN = 20
RUN_TIMEOUT_S = 780
STARTED = re.compile(r"started (client-\d+)")
ENDED = re.compile(r"session (client-\d+) \([0-9a-f-]+\): (\w+)")


def _victim_state(results, timeout_s: float = 300) -> dict:
    """The victim's checkpoint once it acknowledged VICTIM_ACKED_MIN flights messages."""
    state_dir = results / VICTIM / "state"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in state_dir.glob("session-*.current"):
            client_id = path.name.removeprefix("session-").removesuffix(".current")
            state = SessionCheckpoint(state_dir, client_id).store.load_json()
            if state["files"]["flights"]["messages_acked"] >= VICTIM_ACKED_MIN:
                return state
        time.sleep(0.02)
    raise AssertionError(f"{VICTIM} acknowledged no {VICTIM_ACKED_MIN} messages in {timeout_s} s")


def _events(output: str) -> list[tuple[str, str]]:
    """('started' | outcome, client) in the order run_local printed them."""
    events = []
    for line in output.splitlines():
        if (started := STARTED.search(line)) and "session" in line:
            events.append(("started", started.group(1)))
        elif ended := ENDED.search(line):
            events.append((ended.group(2), ended.group(1)))
    return events


def test_eight_clients_joining_one_killed_and_resumed_all_exact_and_independent(tmp_path):
    results = tmp_path / "results"
    process = start_run_local(
        results, tmp_path / "out.txt", "--client-rows", ",".join(map(str, CLIENT_ROWS)),
        "--client-start-interval-s", str(START_INTERVAL_S), "--seed", "41",
        "--invalid-rate", "0.02", "--batch-rows", str(BATCH_ROWS),
        "--client-upload-rows-per-s-max", str(PACE_ROWS_PER_S))
    try:
        state = _victim_state(results)
        killed_pid = LocalServiceRegistry(results / "run" / "registry").kill(VICTIM)
        assert killed_pid is not None, f"{VICTIM} was not running"
        assert state["session_ended"] is None, "the kill came after the victim's upload"
        code = process.wait(RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(60)
    output = (tmp_path / "out.txt").read_text(errors="replace")
    assert code == 0, output[-5000:]

    events = _events(output)
    names = [f"client-{i}" for i in range(1, len(CLIENT_ROWS) + 1)]
    assert [name for kind, name in events if kind == "started"] == names, events
    last_start = max(i for i, (kind, _name) in enumerate(events) if kind == "started")
    first_end = min(i for i, (kind, _name) in enumerate(events) if kind != "started")
    assert first_end > last_start, f"a session ended before every client joined: {events}"
    assert sorted(name for kind, name in events if kind == "completed") == names, events

    client_ids = set()
    for name in names:
        sample = results / "sample" / name
        assert_results_match_reference(results / name, sample / "itineraries.csv",
                                       sample / "airports.csv")
        summary = summary_of(results / name)
        assert summary["status"] == "completed"
        assert summary["resumed"] is (name == VICTIM), name
        assert summary["rows_rejected"]["flights"]["wrong_field_count"] > 0, name  # short rows
        assert sum(summary["rows_invalid_for_queries"]["q4"].values()) > 0, name
        client_ids.add(summary["client_id"])
    assert len(client_ids) == len(names)
    # Different seeds, different data: a session answered with another's rows would differ.
    answers = {(results / name / "q4.csv").read_text() for name in names}
    assert len(answers) == len(names)
    assert f"{len(names)} of {len(names)} sessions completed" in output
    assert "stopping everything this run started" in output
    victim = summary_of(results / VICTIM)
    assert victim["upload"]["flights"]["messages_skipped"] >= VICTIM_ACKED_MIN
    checker_logs = "".join(p.read_text() for p in (results / "run" / "logs").glob("health*"))
    assert f"RESTARTED service={VICTIM}" in checker_logs
