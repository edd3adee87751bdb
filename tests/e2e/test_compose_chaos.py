"""Faults on the Compose deployment: SIGKILLed and paused containers are replaced by the health
checkers and the session's results stay exact.

Driven with `docker-compose` v1 and the Docker SDK, not testcontainers' Compose support: that
runs the v2 `docker compose` plugin, which this machine does not have (see
scripts/compose_deployment.py).
"""

from __future__ import annotations

import threading
import time

import pytest

from scripts.faults.chaos import ACTION_KILL, ACTION_PAUSE
from scripts.faults.victims import KIND_ORDER
from scripts.verify.compose_round import ComposeRound
from scripts.verify.rounds import RoundOptions, run_round
from scripts.verify.table import fault_lines, kind_table, round_table
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

SESSION_TIMEOUT_S = 720
START_TIMEOUT_S = 300
# Detection (heartbeat timeout 3 s, at once for a closed connection) + election + container
# start; a JVM's start deadline is 60 s.
COME_BACK_TIMEOUT_S = 120
# One chaos_verify round: a fault every 5 s, nobody spared, the kinds in turn (the client and
# the health-checker leader first), at least one fault per kind even if the session ends
# sooner, for at most 45 s (ten faults) so that the test stays within about five minutes.
# Seed 27 makes attempts 1, 2, 4, 9 and 10 pauses (their draws are their own: killer.chaos),
# so the client, the leader and the query service are paused, the rest SIGKILLed.
CHAOS_SEED = 27
CHAOS_ROUND = RoundOptions(interval_s=5.0, chaos_duration_s=45.0, pause_ratio=0.3,
                           victims="round-robin", seed=CHAOS_SEED, faults_min=len(KIND_ORDER),
                           session_timeout_s=SESSION_TIMEOUT_S, heal_wait_s=COME_BACK_TIMEOUT_S)


def test_one_chaos_verify_round_kills_and_pauses_every_kind_heals_all_and_stays_exact(
        paced_deployment, e2e_data):
    # Paced: the upload alone lasts >= 40 s on any machine, longer than the 35 s the kinds in
    # turn take, so every kind is hit while the session is in flight.
    result = run_round(ComposeRound(paced_deployment, START_TIMEOUT_S), e2e_data, CHAOS_ROUND,
                       1)
    print("\n".join([*fault_lines(result.heals), *round_table([result]), "",
                     *kind_table([result])]))
    assert result.error is None, result.error
    assert not result.problems, "\n".join(result.problems)
    assert not result.unhealed, "\n".join(fault_lines(result.unhealed))
    # Every kind the round claims to hit was hit: the client, the leader, a broker, the query
    # service, a Spark worker, the Spark master and a follower checker.
    assert result.kinds_hit_in_session >= set(KIND_ORDER), \
        (sorted(result.kinds_hit_in_session), KIND_ORDER)
    actions = {heal.fault.action for heal in result.heals}
    assert actions == {ACTION_KILL, ACTION_PAUSE}, actions


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
        paced_deployment, e2e_data):
    deployment = paced_deployment  # the kills land during the paced flights upload
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
    flights_done = deployment.wait_for_log("client-1", r"upload flights: done", 1.0)
    assert flights_done.at > killed_at, "the kills landed after the upload: nothing was tested"
    assert_results_exact(deployment.results_dir / "client-1", e2e_data)
    print(f"killed {leader} and broker-1; restarts {restarts}")
