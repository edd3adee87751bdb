"""Broker faults on the Compose deployment: while a client session runs, every broker of the
replicated Kaska cluster is SIGKILLed once, one at a time: a follower as soon as the client
starts (its upload must go on with the other two), then the leader, then the broker left
(the leader again, or a follower). Before each next kill the previous victim must have been
restarted by the health checkers and follow the leader again (never two brokers down), and at
least KILL_INTERVAL_S must have passed.

Checked, in this order:
- the session's results equal the reference row for row (and summary.json adds up);
- every kill was followed by a start of that container (Docker events; nothing but the health
  checkers starts containers once the deployment is up) and a health checker's
  `RESTART service=broker-N` decision;
- the upload kept moving while a broker was down: the client's resume checkpoint
  (results/client-1/state on the host, rewritten every 0.5 s with the number of messages the
  brokers acknowledged) grew between two readings taken after a kill and before that broker
  listened again (its container dead, then its process starting);
- a restarted broker counts as alive: no broker was restarted more often than it was killed,
  but for a start deadline missed by a broker that had not listened yet (a slow start on a
  loaded machine is the checkers doing their job).

The brokers publish no ports: the leader is read from their logs through the Docker SDK
(`broker N: leader of epoch E (leader N)`, services/broker/replication/node.py).

Driven with `docker-compose` v1 and the Docker SDK, not testcontainers' Compose support: that
runs the v2 `docker compose` plugin, which this machine does not have (see compose_deployment).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from client.resume import SessionCheckpoint
from scripts.deploy.deployment import EventRecorder
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

BROKERS = ("broker-1", "broker-2", "broker-3")
START_TIMEOUT_S = 300
SESSION_TIMEOUT_S = 720
KILL_INTERVAL_S = 5.0
# Heartbeat loss seen at once + `docker start` + the broker's start and first fetch, on a busy
# 2-core machine: generous.
REJOIN_TIMEOUT_S = 120
PROGRESS_POLL_S = 0.25
ROLE_LINE = re.compile(r"broker (\d+): (leader|follower|candidate) of epoch (\d+) "
                       r"\(leader (\w+)\)")
LISTENING_LINE = re.compile(r"broker \d+ listening on")


@dataclass(frozen=True)
class Role:
    at: float
    role: str
    epoch: int
    leader: str | None  # "broker-N", None while it knows no leader


@dataclass(frozen=True)
class BrokerKill:
    service: str
    at: float  # epoch seconds, taken right before the SIGKILL
    was_leader: bool
    started_at: float | None = None  # its container started again (Docker event)
    listening_at: float | None = None  # its broker listened again (its log)


@dataclass(frozen=True)
class Reading:
    at: float
    acked: int  # messages of both files the client has checkpointed as acknowledged


def roles_since(deployment, service: str, since: float) -> list[Role]:
    """The role lines `service` logged after `since` (epoch seconds)."""
    found = []
    for line in deployment.log_lines(service):
        match = ROLE_LINE.search(line.text)
        if match and line.at >= since:
            leader = match.group(4)
            found.append(Role(line.at, match.group(2), int(match.group(3)),
                              f"broker-{leader}" if leader.isdigit() else None))
    return found


def agreed_leader(deployment) -> tuple[str, int] | None:
    """(leader, epoch) when every broker runs and the last role line each logged in its current
    run names the same leader at the same epoch; else None (an election, a broker down, or a
    restarted one that has not heard from the leader yet)."""
    named = set()
    for service in BROKERS:
        if deployment.container(service).status != "running":
            return None
        roles = roles_since(deployment, service, deployment.started_at(service))
        if not roles or roles[-1].leader is None:
            return None
        named.add((roles[-1].leader, roles[-1].epoch))
    return named.pop() if len(named) == 1 else None


def listening_after(deployment, service: str, since: float) -> float | None:
    return next((line.at for line in deployment.log_lines(service)
                 if line.at > since and LISTENING_LINE.search(line.text)), None)


def start_after(events: list[dict], service: str, since: float) -> float | None:
    """When `service`'s container was next started after `since` (Docker events), or None."""
    return min((event["timeNano"] / 1e9 for event in events
                if event.get("Action") == "start"
                and event["Actor"]["Attributes"].get("com.docker.compose.service") == service
                and event["timeNano"] / 1e9 > since), default=None)


def next_target(leader: str, killed: set[str]) -> str:
    """First a follower (the upload goes on without a failover), then the leader, then the
    broker left."""
    if not killed:
        return min(s for s in BROKERS if s != leader)
    if leader not in killed:
        return leader
    return next(s for s in BROKERS if s not in killed)


class ProgressReader:
    """Reads the client's resume checkpoint every PROGRESS_POLL_S on a thread."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="client-progress", daemon=True)
        self._checkpoint: SessionCheckpoint | None = None

    def start(self) -> ProgressReader:
        self._thread.start()
        return self

    def stop(self) -> list[Reading]:
        self._stop.set()
        self._thread.join(5.0)
        return self.readings

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_POLL_S):
            reading = self._read()
            if reading is not None:
                self.readings.append(reading)

    def _read(self) -> Reading | None:
        try:
            if self._checkpoint is None:
                client_id = (self.state_dir / "client-id").read_text().strip()
                self._checkpoint = SessionCheckpoint(self.state_dir, client_id)
            state = self._checkpoint.store.load_json()
        except Exception:  # noqa: BLE001 - not written yet, or caught mid-rename: next time
            return None
        if state is None:
            return None
        return Reading(time.time(),
                       sum(progress["messages_acked"] for progress in state["files"].values()))


def acked_while_down(readings: list[Reading], kill: BrokerKill) -> tuple[int, int] | None:
    """(acknowledged at the first reading after the kill, at the last one before the broker
    listened again); None without two readings in that window."""
    inside = [r for r in readings if kill.at <= r.at < (kill.listening_at or float("inf"))]
    return (inside[0].acked, inside[-1].acked) if len(inside) >= 2 else None


def wait_back(deployment, events: EventRecorder, kill: BrokerKill) -> BrokerKill:
    """Until the killed broker's container was started again, its broker listens and every
    broker follows one leader; the kill with those times filled in."""
    started_at = deployment.wait_for(f"{kill.service} to be started again",
                                     lambda: start_after(events.events, kill.service, kill.at),
                                     REJOIN_TIMEOUT_S)
    listening_at = deployment.wait_for(
        f"{kill.service} to listen again",
        lambda: listening_after(deployment, kill.service, started_at), REJOIN_TIMEOUT_S)
    deployment.wait_for(f"{kill.service} to follow the leader again",
                        lambda: agreed_leader(deployment), REJOIN_TIMEOUT_S)
    return replace(kill, started_at=started_at, listening_at=listening_at)


def _first_restart_after_a_kill(at: float, service: str, kills: list[BrokerKill],
                                decisions: list[tuple[float, str]]) -> bool:
    """The decision at `at` is the first one for `service` after one of its kills."""
    for kill in kills:
        if kill.service == service:
            after = [t for t, s in decisions if s == service and t >= kill.at - 1.0]
            if after and after[0] == at:
                return True
    return False


def _slow_start(deployment, at: float, service: str, cause: str) -> bool:
    """A start deadline missed (the cause says so) by a broker that had not listened since its
    previous start when the decision was taken: slow, not unrecognised."""
    if not cause.startswith(("no sign of life", "never seen by this node")):
        return False
    previous = [t for t, s in deployment.restart_decisions() if s == service and t < at]
    since = previous[-1] if previous else 0.0
    listened_at = listening_after(deployment, service, since)
    return listened_at is None or listened_at > at


def test_each_broker_killed_once_leader_included_session_exact_upload_kept_moving(
        paced_deployment, e2e_data):
    # The upload is paced (>= 40 s on any machine): the first kill, at its start, lands while
    # it is in flight however fast the machine is.
    deployment = paced_deployment
    deployment.up()
    results_dir = deployment.results_dir / "client-1"
    deployment.wait_for("the brokers to agree on a leader", lambda: agreed_leader(deployment),
                        START_TIMEOUT_S)
    events = EventRecorder(deployment).start()
    progress = ProgressReader(results_dir / "state").start()
    deployment.wait_for_log("client-1", r"session of", START_TIMEOUT_S)
    # The first kill must land while acknowledgements flow: on a quiet machine a killed broker
    # is back in ~2 s, which once fell entirely before the client's first acknowledgement.
    deployment.wait_for("the client's first acknowledged message",
                        lambda: progress.readings and progress.readings[-1].acked > 0,
                        START_TIMEOUT_S)

    kills: list[BrokerKill] = []
    while len(kills) < len(BROKERS):
        if kills:
            kills[-1] = wait_back(deployment, events, kills[-1])
            time.sleep(max(0.0, kills[-1].at + KILL_INTERVAL_S - time.time()))
        leader, epoch = deployment.wait_for("an agreed leader", lambda: agreed_leader(deployment),
                                            REJOIN_TIMEOUT_S)
        target = next_target(leader, {kill.service for kill in kills})
        at = time.time()
        deployment.kill(target)
        kills.append(BrokerKill(target, at, target == leader))
        print(f"{time.strftime('%H:%M:%S')} killed {target} (leader {leader}, epoch {epoch})")
    kills[-1] = wait_back(deployment, events, kills[-1])

    deployment.wait_client_done("client-1", SESSION_TIMEOUT_S)
    readings = progress.stop()
    events.stop()
    summary = assert_results_exact(results_dir, e2e_data)

    client_at = deployment.started_at("client-1")
    decisions = [(at, service) for at, service in deployment.restart_decisions()
                 if service in BROKERS and at >= kills[0].at - 1.0]
    report = ["broker kills (seconds since the client started):"]
    for kill in kills:
        report.append(
            f"  {kill.service}{' (leader)' if kill.was_leader else ''} killed at "
            f"+{kill.at - client_at:.1f}, container started after "
            f"{kill.started_at - kill.at:.1f} s, listening after "
            f"{kill.listening_at - kill.at:.1f} s; messages acknowledged while down: "
            f"{acked_while_down(readings, kill)}")
    report.append("broker restart decisions: " + ", ".join(
        f"{service} +{at - client_at:.1f}" for at, service in decisions))
    report.append(f"client timings: {summary.get('timings_s')}")
    print("\n".join(report))

    assert any(kill.was_leader for kill in kills), "\n".join(report)
    for kill in kills:
        assert any(service == kill.service and at >= kill.at - 1.0
                   for at, service in decisions), \
            f"no health checker decided to restart {kill.service}\n" + "\n".join(report)
    moved = [kill.service for kill in kills
             if (acked := acked_while_down(readings, kill)) and acked[1] > acked[0]]
    assert moved, "no message acknowledged while a broker was down\n" + "\n".join(report) + \
        f"\nreadings: {[(round(r.at - client_at, 1), r.acked) for r in readings]}"
    # A restarted broker counts as alive: a restart beyond the kills is allowed only for a start
    # deadline missed by a broker that really had not come up yet (a slow start under load).
    unexplained = [(at, service, cause) for at, service, cause in deployment.restart_causes()
                   if service in BROKERS and at >= kills[0].at - 1.0
                   and not _first_restart_after_a_kill(at, service, kills, decisions)
                   and not _slow_start(deployment, at, service, cause)]
    assert not unexplained, \
        "a restarted broker was restarted again (not recognised as alive)\n" + \
        "\n".join(report) + f"\nunexplained restarts: {unexplained}"
