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
from collections import Counter

import pytest

from scripts.killer import DockerBackend, SpareLastBackend, chaos
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

    restarts = deployment.restarts()
    print("restarts:", [(round(r.at - chaos_started, 1), r.service, r.action, r.by)
                        for r in restarts])
    killed = Counter(kill.name for kill in kills)
    first_kill_at = {}
    for kill in kills:
        first_kill_at.setdefault(kill.name, chaos_started + kill.at_s)
    for name, count in killed.items():
        healed = [r for r in restarts if r.service == name and r.at >= first_kill_at[name]]
        assert len(healed) >= count, f"{name} killed {count}x, restarted {len(healed)}x"
    states = {name: c.attrs["State"] for name, c in deployment.containers().items()}
    for name in killed:
        finished = name.startswith("client-") and states[name]["ExitCode"] == 0
        assert states[name]["Status"] == "running" or finished, (name, states[name])
    print(f"chaos: {len(kills)} kills {dict(killed)}; {len(restarts)} restarts")


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
