"""The Compose deployment as `make docker-compose-up` runs it: a fresh deployment answers one
client session exactly (the session of the suite's shared deployment), and `docker-compose down`
stops every service on SIGTERM, none needing Compose's SIGKILL.

Driven with `docker-compose` v1 and the Docker SDK, not testcontainers' Compose support: that
runs the v2 `docker compose` plugin, which this machine does not have (see compose_deployment).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import pytest

from scripts.deploy.deployment import EventRecorder
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

SESSION_TIMEOUT_S = 600
PICKUP_TIMEOUT_S = 300
# Causes of a restart decision (healthchecker/supervision/machine.py) that mean "silent too
# long", not "crashed".
SILENCE_CAUSES = ("no heartbeat", "no sign of life", "never seen by this node")
# A decision on a peer's record (healthchecker/supervision/peers.py): the peer logged its own
# cause.
PEER_CAUSE = "dead according to a peer"
PHASE_DEAD_LINE = re.compile(r"PHASE service=(?P<service>\S+) phase=dead previous=\S+ "
                             r"reason=(?P<reason>.*)$")
# The client's documented status for "stopped by a signal, progress checkpointed, resumable".
CLIENT_EXIT_INTERRUPTED = 3


def _own_cause(deployment, at: float, service: str, cause: str) -> str:
    """The cause a restart decision names, traced back when it only says a peer judged the
    service dead (a checker that took over acts on its peers' records): the latest death a
    checker logged for the service with a cause of its own, at or before the decision."""
    if cause != PEER_CAUSE:
        return cause
    reasons = [(line.at, match.group("reason")) for checker in deployment.checkers()
               for line in deployment.log_lines(checker)
               if (match := PHASE_DEAD_LINE.search(line.text)) and match.group("service") ==
               service and line.at <= at and not match.group("reason").startswith(PEER_CAUSE)]
    return max(reasons)[1] if reasons else cause


def crash_restarts(deployment) -> list[tuple[float, str, str]]:
    """Restart decisions for a service that crashed (a connection closed without a goodbye,
    an exit, nothing listening, a failed start), not counting services a test killed on
    purpose before the decision. Silence past a deadline (a JVM starting slowly, a heartbeat
    late on a loaded machine) is the checkers doing their job, not a crash."""
    causes = [(at, service, _own_cause(deployment, at, service, cause))
              for at, service, cause in deployment.restart_causes()]
    return [(at, service, cause) for at, service, cause in causes
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


@pytest.mark.takes_shared_deployment_down
def test_down_mid_job_stops_every_service_on_sigterm_alone(shared_deployment):
    """The shared deployment's last act: a new session, and the moment the query service picks
    it up, SIGTERM for it (a job in flight must be handed back) and `docker-compose down` for
    the rest; no service may need Compose's SIGKILL (10 s after its SIGTERM)."""
    deployment = shared_deployment
    deployment.wait_client_done("client-1", SESSION_TIMEOUT_S)  # the suite's first session
    query_log = deployment.follow("query-service")
    client_id = deployment.start_new_session("client-1")
    recorder = EventRecorder(deployment).start()
    deployment_running = deployment.running()
    query_log.wait_for(rf"session {client_id} picked up", PICKUP_TIMEOUT_S)
    deployment.container("query-service").kill(signal="SIGTERM")
    term_at = time.time()
    started = time.monotonic()
    deployment.down()
    down_s = time.monotonic() - started
    lines = query_log.stop()
    stops = _stop_times(recorder.stop())
    report = "\n".join(f"  {name:<16} {info.get('stop_s', float('nan')):6.2f} s  exit "
                       f"{info.get('exit_code')}  signals {info['signals']}"
                       for name, info in sorted(stops.items()))
    print(f"query service SIGTERMed mid-job, then docker-compose down took {down_s:.1f} s; "
          f"per service:\n{report}")
    # The scenario: the job was in flight when the signal landed (its results not written).
    written = [line for line in lines
               if f"session {client_id}: results written" in line.text and line.at < term_at]
    assert not written, f"the job finished before the SIGTERM: nothing was handed back {written}"
    assert set(deployment_running) <= set(stops), (deployment_running, report)
    for name in deployment_running:
        info = stops[name]
        # SIGTERM only (the query service's may come twice: the test's, then down's).
        assert set(info["signals"]) == {15}, f"{name} needed more than SIGTERM\n{report}"
        expected = {0, CLIENT_EXIT_INTERRUPTED} if name.startswith("client-") else {0}
        assert info["exit_code"] in expected, f"{name} exit code\n{report}"
