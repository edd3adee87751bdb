"""`--metrics-listen` on real health checkers: a killed service shows up in /metrics as a death,
a restart and a heal time, on the leader; the followers know the restart from shared state."""

from __future__ import annotations

import pytest

from healthchecker.metrics import HEAL_BUCKETS_S
from tests.integration.healthchecker.local_cluster import LocalCluster, wait_until
from tests.integration.metrics_scrape import excerpt, scrape

pytestmark = pytest.mark.integration

HEAL_S_MAX = 10.0
LEADER = 3  # bully: the highest id


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, checkers=3, metrics=True)
    yield cluster
    cluster.shutdown()


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_killed_service_counted_as_death_restart_and_heal(cluster):
    cluster.add_dummy("svc")
    cluster.start_checkers()
    old_pid = cluster.start("svc")
    wait_until(lambda: cluster.leader() == LEADER, 15)
    wait_until(lambda: cluster.heard_by_all("svc", old_pid), 10)
    leader_port = cluster.metrics_ports[LEADER]
    _, before = scrape(leader_port)
    assert value(before, "healthchecker_role", role="leader") == 1
    assert value(before, "healthchecker_leader_id") == LEADER
    assert value(before, "healthchecker_heartbeats_received_total") > 0
    assert value(before, "healthchecker_service_phase", service="svc", phase="up") == 1

    cluster.registry.kill("svc")
    new_pid = wait_until(lambda: cluster.new_pid("svc", old_pid), HEAL_S_MAX)
    wait_until(lambda: cluster.heard_from("svc", new_pid), HEAL_S_MAX)

    def healed():
        text, samples = scrape(leader_port)
        return (text, samples) if value(samples, "healthchecker_heal_seconds_count") else None

    text, after = wait_until(healed, HEAL_S_MAX, poll_s=0.1)
    assert value(after, "healthchecker_deaths_detected_total", service="svc",
                 cause="connection_lost") == 1
    assert value(after, "healthchecker_restarts_performed_total", service="svc",
                 outcome="ok") == 1
    assert value(after, "healthchecker_service_restarts_total", service="svc") == 1
    assert 0 < value(after, "healthchecker_heal_seconds_sum") < HEAL_S_MAX
    assert value(after, "healthchecker_heal_seconds_count") == 1
    bounds = [le for name, labels in after if name == "healthchecker_heal_seconds_bucket"
              for key, le in labels if key == "le"]
    assert sorted(bounds, key=float) == [str(b) for b in HEAL_BUCKETS_S] + ["+Inf"]
    assert value(after, "healthchecker_heal_seconds_bucket", le="+Inf") == 1
    assert "_created" not in text  # the endpoint turns the library's `_created` series off
    assert value(after, "healthchecker_service_phase", service="svc", phase="up") == 1
    print(excerpt(text, "healthchecker_deaths", "healthchecker_restarts",
                  "healthchecker_heal_seconds_count", "healthchecker_heal_seconds_sum",
                  'healthchecker_heal_seconds_bucket{le="0.5"}',
                  'healthchecker_service_restarts_total{service="svc"}',
                  "healthchecker_heartbeats_received", "healthchecker_elections",
                  'healthchecker_role{role="leader"}', "healthchecker_leader_id"))

    # A follower restarts nothing, but learns the restart from the leader's shared state.
    def follower_knows():
        _, samples = scrape(cluster.metrics_ports[1])
        return samples if value(samples, "healthchecker_service_restarts_total",
                                service="svc") == 1 else None

    follower = wait_until(follower_knows, HEAL_S_MAX, poll_s=0.1)
    assert value(follower, "healthchecker_role", role="follower") == 1
    assert value(follower, "healthchecker_leader_id") == LEADER
    assert not any(name == "healthchecker_restarts_performed_total" for name, _ in follower)
