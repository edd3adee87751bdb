"""The Compose deployment as `make docker-compose-up` runs it: a fresh deployment answers one
client session exactly (the session of the suite's shared deployment), and `docker-compose down`
stops every service on SIGTERM, none needing Compose's SIGKILL.

Driven with `docker-compose` v1 and the Docker SDK, not testcontainers' Compose support: that
runs the v2 `docker compose` plugin, which this machine does not have (see compose_deployment).
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from scripts.compose_deployment import EventRecorder
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

SESSION_TIMEOUT_S = 600
PICKUP_TIMEOUT_S = 300
# Causes of a restart decision (healthchecker/supervision.py) that mean "silent too long", not
# "crashed".
SILENCE_CAUSES = ("no heartbeat", "no sign of life", "never seen by this node")
# The client's documented status for "stopped by a signal, progress checkpointed, resumable".
CLIENT_EXIT_INTERRUPTED = 3


def crash_restarts(deployment) -> list[tuple[float, str, str]]:
    """Restart decisions for a service that crashed (a connection closed without a goodbye,
    an exit, nothing listening, a failed start), not counting services a test killed on
    purpose before the decision. Silence past a deadline (a JVM starting slowly, a heartbeat
    late on a loaded machine) is the checkers doing their job, not a crash."""
    return [(at, service, cause) for at, service, cause in deployment.restart_causes()
            if not cause.startswith(SILENCE_CAUSES)
            and not any(killed == service and killed_at <= at
                        for killed_at, killed in deployment.kills)]


def test_fresh_deployment_answers_a_session_with_malformed_rows_exactly(shared_deployment,
                                                                      e2e_data):
    deployment = shared_deployment
    deployment.wait_client_done("client-1", SESSION_TIMEOUT_S)
    assert_results_exact(deployment.results_dir / "client-1", e2e_data)
    # A healthy start must not look like a crash to the health checkers.
    assert crash_restarts(deployment) == [], deployment.restart_causes()
    assert deployment.leader() is not None


def _stop_times(events: list[dict]) -> dict[str, dict]:
    """Per service: seconds from SIGTERM to exit, the signals sent, the exit code."""
    by_service: dict[str, dict] = defaultdict(lambda: {"signals": []})
    for event in sorted(events, key=lambda e: e["timeNano"]):
        attributes = event["Actor"]["Attributes"]
        service = by_service[attributes.get("com.docker.compose.service", "?")]
        at = event["timeNano"] / 1e9
        if event["Action"] == "kill":
            service["signals"].append(int(attributes["signal"]))
            service.setdefault("term_at", at)
        elif event["Action"] == "die" and "term_at" in service:
            service["stop_s"] = at - service["term_at"]
            service["exit_code"] = int(attributes["exitCode"])
    return dict(by_service)


def test_down_mid_session_stops_every_service_on_sigterm_within_seconds(deployment):
    deployment.up()
    # Down while the query service works on the session: in-flight work must be handed back.
    deployment.wait_for_log("query-service", r"session \S+ picked up", PICKUP_TIMEOUT_S)
    running = deployment.running()
    recorder = EventRecorder(deployment).start()
    started = time.monotonic()
    deployment.down()
    down_s = time.monotonic() - started
    stops = _stop_times(recorder.stop())
    report = "\n".join(f"  {name:<16} {info.get('stop_s', float('nan')):6.2f} s  exit "
                       f"{info.get('exit_code')}  signals {info['signals']}"
                       for name, info in sorted(stops.items()))
    print(f"docker-compose down took {down_s:.1f} s; per service:\n{report}")
    assert set(running) <= set(stops), (running, report)
    for name in running:
        info = stops[name]
        assert info["signals"] == [15], f"{name} needed more than SIGTERM\n{report}"
        expected = {0, CLIENT_EXIT_INTERRUPTED} if name.startswith("client-") else {0}
        assert info["exit_code"] in expected, f"{name} exit code\n{report}"
