"""The status page against a local deployment (`run_local`): a SIGKILLed broker shows in the
timeline as dead, restarted and healed, its row comes back up with one more restart, and the
session's progress moves to done (run_local `--keep-running` keeps the page up meanwhile)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request

import pytest

from healthchecker.local_registry import LocalServiceRegistry
from tests.integration.run_local_helpers import start_run_local

pytestmark = [pytest.mark.integration, pytest.mark.slow]

URL_LINE = re.compile(r"the live status page: (http://127\.0\.0\.1:\d+/)")
START_TIMEOUT_S = 180
HEAL_TIMEOUT_S = 60
SESSION_TIMEOUT_S = 600
POLL_S = 0.5
VICTIM = "broker-2"


def wait_for(what: str, condition, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(POLL_S)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def status(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url + "api/status", timeout=5) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, OSError):
        return None  # not up yet, or restarting


def row(doc: dict | None, name: str) -> dict | None:
    return None if doc is None else next((r for r in doc["services"] if r["name"] == name),
                                         None)


def test_a_killed_broker_shows_dead_restarted_healed_and_the_session_completes(tmp_path):
    output = tmp_path / "out.txt"
    process = start_run_local(tmp_path / "results", output, "--rows", "20000",
                              "--keep-running")
    try:
        url = wait_for("the status page's URL", lambda: URL_LINE.search(
            output.read_text(errors="replace")), START_TIMEOUT_S).group(1)
        before = wait_for(f"{VICTIM} up on the page", lambda: (
            (doc := status(url)) and (r := row(doc, VICTIM)) and r["state"] == "up"
            and doc["brokers"]["leader"] and doc["checkers"]["leader"] and doc), START_TIMEOUT_S)
        restarts_before = row(before, VICTIM)["restarts"]
        registry = LocalServiceRegistry(tmp_path / "results" / "run" / "registry")
        killed_at = time.time()
        os.kill(registry.read_pid(VICTIM).pid, signal.SIGKILL)

        def healed() -> dict | None:
            doc = status(url)
            r = row(doc, VICTIM)
            return doc if r and r["state"] == "up" and r["restarts"] > restarts_before \
                and (r["last_heal_at_s"] or 0) >= killed_at else None

        after = wait_for(f"{VICTIM} up again after a restart", healed, HEAL_TIMEOUT_S)
        events = sorted((e for e in after["timeline"]
                         if e["service"] == VICTIM and e["at_s"] >= killed_at - 1),
                        key=lambda e: e["at_s"])
        kinds = [e["kind"] for e in events]
        assert kinds.index("death") < kinds.index("restart") < kinds.index("healed"), events

        # `--keep-running`: the page stays up after the session, so the test waits for the
        # page itself to say the session is done instead of guessing which poll was the last.
        def session_done() -> dict | None:
            doc = status(url)
            if doc is None or len(doc["sessions"]) != 1:
                return None
            session = doc["sessions"][0]
            return session if session["done"] else None

        session = wait_for("the page to show the session done", session_done,
                           SESSION_TIMEOUT_S)
        assert session["ended"] and session["rows_sent"] > 0, session
        assert session["batches_uploaded"] == session["batches_total"] > 0, session
        assert all(q["done"] for q in session["queries"]), session
        assert any(q["result_rows"] > 0 for q in session["queries"]), session
        assert process.poll() is None, "run_local stopped before it was told to"
        process.terminate()  # SIGTERM: run_local stops what it started, and says how it went
        assert process.wait(60) == 0, output.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.terminate()  # run_local stops what it started on SIGTERM
            process.wait(60)
