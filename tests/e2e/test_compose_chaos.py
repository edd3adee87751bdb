"""Faults on the Compose deployment: SIGKILLed containers are restarted by the health checkers
and the session's results stay exact.

Driven with `docker-compose` v1 and the Docker SDK, not testcontainers' Compose support: that
runs the v2 `docker compose` plugin, which this machine does not have (see compose_deployment).
"""

from __future__ import annotations

import io
import random
import threading
import time
from collections import Counter, defaultdict

import pytest

from scripts.killer import DockerBackend, SpareLastBackend, chaos
from tests.e2e.compose_deployment import EventRecorder
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

SESSION_TIMEOUT_S = 720
START_TIMEOUT_S = 300
CHAOS_INTERVAL_S = 5.0
CHAOS_DURATION_S = 60.0
CHAOS_SEED = 20
# Heartbeat timeout (3 s) + election (~3 s) + a new leader's grace (30 s) + container start.
COME_BACK_TIMEOUT_S = 120


def test_random_sigkills_during_a_session_are_all_healed_and_results_stay_exact(
        deployment, e2e_data):
    deployment.up()
    deployment.wait_for_log("client-1", r"session of", START_TIMEOUT_S)
    # Any container may die, the leader and the client included; never the last health
    # checker (nothing would be left to restart anything), as `make chaos` does.
    backend = SpareLastBackend(DockerBackend(deployment.project), ["healthchecker-"])
    events = EventRecorder(deployment).start()
    chaos_log = io.StringIO()
    chaos_started = time.time()
    kills = chaos(backend, CHAOS_INTERVAL_S, CHAOS_DURATION_S, rng=random.Random(CHAOS_SEED),
                  out=chaos_log)
    print(chaos_log.getvalue())
    # A new leader restarts nothing for its first 30 s (compose_generator.RESTART_GRACE_S), so
    # a run that kills the leader can find nothing else to kill for a while.
    assert len(kills) >= CHAOS_DURATION_S // CHAOS_INTERVAL_S // 2, chaos_log.getvalue()

    deployment.wait_client_done("client-1", SESSION_TIMEOUT_S)
    assert_results_exact(deployment.results_dir / "client-1", e2e_data)
    # Nothing but the health checkers starts containers here, so a container start after a
    # kill is a restart by them (their RESTARTED log line can be lost: a leader killed between
    # starting a container and logging it).
    deployment.wait_for("every killed container to be started again",
                        lambda: not _unhealed(kills, chaos_started, events.events),
                        COME_BACK_TIMEOUT_S)
    events.stop()
    restarts = deployment.restarts()
    print("restarts:", [(round(r.at - chaos_started, 1), r.service, r.action, r.by)
                        for r in restarts])
    killed = Counter(kill.name for kill in kills)
    decided = {service for at, service in deployment.restart_decisions() if at > chaos_started}
    assert set(killed) <= decided, (killed, decided)
    print(f"chaos: {len(kills)} kills {dict(killed)}; {len(restarts)} restarts logged")


def _unhealed(kills, chaos_started: float, events: list[dict]) -> list[tuple[str, float]]:
    """The kills not followed by a start of the same service before its next kill."""
    starts = defaultdict(list)
    for event in events:
        if event.get("Action") == "start":
            service = event["Actor"]["Attributes"].get("com.docker.compose.service")
            starts[service].append(event["timeNano"] / 1e9)
    times = defaultdict(list)
    for kill in kills:
        times[kill.name].append(chaos_started + kill.at_s)
    unhealed = []
    for name, killed_at in times.items():
        bounds = [*killed_at[1:], float("inf")]
        for at, next_kill_at in zip(killed_at, bounds, strict=True):
            if not any(at < start <= next_kill_at for start in starts[name]):
                unhealed.append((name, at))
    return unhealed


def _kill_together(deployment, services: list[str]) -> float:
    """SIGKILL the services' containers at (nearly) the same moment; returns when."""
    threads = [threading.Thread(target=deployment.kill, args=(s,)) for s in services]
    killed_at = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return killed_at


def test_leader_and_broker_killed_at_once_both_come_back_and_results_stay_exact(
        deployment, e2e_data):
    deployment.up()
    leader = deployment.wait_for("an agreed health-checker leader", deployment.leader,
                                 START_TIMEOUT_S)
    deployment.wait_for_log("client-1", r"upload airports: done", START_TIMEOUT_S)
    killed_at = _kill_together(deployment, [leader, "broker-1"])

    for service in (leader, "broker-1"):
        deployment.wait_for(f"{service} to run again",
                            lambda s=service: deployment.container(s).status == "running"
                            and deployment.started_at(s) > killed_at,
                            COME_BACK_TIMEOUT_S)
    restarts = [r for r in deployment.restarts() if r.at > killed_at]
    healers = {r.service: r.by for r in restarts}
    assert {leader, "broker-1"} <= set(healers), restarts
    assert healers["broker-1"] != leader and healers[leader] != leader, restarts

    deployment.wait_client_done("client-1", SESSION_TIMEOUT_S)
    assert_results_exact(deployment.results_dir / "client-1", e2e_data)
    print(f"killed {leader} and broker-1; restarts {restarts}")
