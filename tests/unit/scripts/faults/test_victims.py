"""Service kinds and the chaos loop's victim pickers."""

import random

import pytest

from scripts.faults.victims import (
    KIND_ORDER,
    LEADER_KIND,
    AnyVictim,
    RoundRobinKinds,
    VictimConfigError,
    fault_kind,
    service_kind,
)

DEPLOYMENT = ["broker-1", "broker-2", "broker-3", "client-1", "healthchecker-1",
              "healthchecker-2", "healthchecker-3", "query-service", "spark-master",
              "spark-worker-1", "spark-worker-2", "status"]


def test_kinds_drop_the_number_and_set_the_leader_apart():
    assert [service_kind(n) for n in ("broker-12", "spark-worker-1", "query-service",
                                      "spark-master", "client-3")] == [
        "broker", "spark-worker", "query-service", "spark-master", "client"]
    assert fault_kind("healthchecker-2", "healthchecker-2") == LEADER_KIND
    assert fault_kind("healthchecker-1", "healthchecker-2") == "healthchecker"
    assert fault_kind("healthchecker-1", None) == "healthchecker"


def pick_and_hit(picker, candidates, leader, rng):
    name = picker.choose(candidates, leader, rng)
    picker.hit(name, leader)
    return name


def test_round_robin_hits_every_kind_in_turn_client_and_leader_first():
    picker = RoundRobinKinds()
    rng = random.Random(0)
    picked = [pick_and_hit(picker, DEPLOYMENT, "healthchecker-3", rng)
              for _ in range(3 * len(KIND_ORDER))]
    kinds = [fault_kind(name, "healthchecker-3") for name in picked]
    assert kinds == list(KIND_ORDER) * 3
    assert kinds[:2] == ["client", LEADER_KIND]
    assert {name for name in picked if name.startswith("healthchecker-")} == {
        "healthchecker-1", "healthchecker-2", "healthchecker-3"}


def test_a_kind_skipped_or_missed_keeps_its_turn():
    picker = RoundRobinKinds()
    rng = random.Random(0)
    # No leader agreed (an election), no client running: the turn passes to the brokers...
    without_client = [name for name in DEPLOYMENT if name != "client-1"]
    assert service_kind(pick_and_hit(picker, without_client, None, rng)) == "broker"
    # ... and comes back to the client and the leader as soon as they are there.
    assert pick_and_hit(picker, DEPLOYMENT, "healthchecker-1", rng) == "client-1"
    # A fault that did not take (no hit) leaves the kind first in line.
    assert picker.choose(DEPLOYMENT, "healthchecker-1", rng) == "healthchecker-1"
    assert picker.choose(DEPLOYMENT, "healthchecker-1", rng) == "healthchecker-1"
    assert pick_and_hit(picker, DEPLOYMENT, "healthchecker-1", rng) == "healthchecker-1"
    assert pick_and_hit(picker, DEPLOYMENT, "healthchecker-1", rng) == "query-service"
    assert picker.choose([], None, rng) is None


def test_round_robin_falls_back_on_unlisted_kinds_only_when_nothing_listed_runs():
    picker = RoundRobinKinds(order=("broker",))
    rng = random.Random(0)
    assert picker.choose(["datagen", "broker-1"], None, rng) == "broker-1"
    assert picker.choose(["datagen"], None, rng) == "datagen"


def test_a_bad_order_is_a_named_error():
    for order in ((), ("broker", "broker")):
        with pytest.raises(VictimConfigError):
            RoundRobinKinds(order)


def test_any_victim_is_uniform_over_the_candidates():
    rng = random.Random(1)
    picked = {AnyVictim().choose(DEPLOYMENT, None, rng) for _ in range(500)}
    assert picked == set(DEPLOYMENT)
    assert AnyVictim().choose([], None, rng) is None
