"""The in-sync replicas a Kafka client reads in Metadata, on three real brokers with three
replication groups: a SIGKILLed broker leaves the ISR of every partition (those it followed,
and those it led, whose new leader never hears from it), the under-replicated partitions show in
/metrics, and once restarted it catches up and is back in every ISR."""

from __future__ import annotations

import signal

import pytest
from kafka.protocol.metadata import MetadataRequest

from services.broker.replication.in_sync import REPLICA_LAG_TIME_MAX_S
from services.broker.replication.placement import preferred_leader
from tests.integration.kafka.clients import create_topic, produce
from tests.integration.kafka.kafka_broker import kafka_request, wait_for
from tests.integration.metrics_scrape import scrape
from tests.integration.replication.cluster import FAST_ELECTIONS, BrokerCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 6
GROUPS = 3


@pytest.fixture
def cluster(tmp_path):
    cluster = BrokerCluster(tmp_path / "isr", size=3, kafka=True, groups=GROUPS,
                            extra_args=FAST_ELECTIONS).start()
    yield cluster
    cluster.close()


def _metadata(cluster: BrokerCluster, broker: int, topic: str):
    try:
        return kafka_request(cluster.kafka_address(broker), MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].partitions
    except OSError:
        return None


def leaders_answers(cluster: BrokerCluster, topic: str) -> dict[int, tuple[int, list, list]]:
    """{partition: (leader, replicas, isr)} as each partition's leader answers it (only a
    group's leader knows its ISR); partitions whose leader no live broker answers for are left
    out."""
    found = {}
    for broker in cluster.live_ids():
        for p in _metadata(cluster, broker, topic) or ():
            if p.leader_id == broker:
                found[p.partition_index] = (p.leader_id, list(p.replica_nodes),
                                            list(p.isr_nodes))
    return found


def every_isr(cluster: BrokerCluster, topic: str, expected: list[int]):
    """The leaders' answers once every partition has a live leader reporting `expected`."""
    answers = leaders_answers(cluster, topic)
    if len(answers) == PARTITIONS and all(isr == expected for _l, _r, isr in answers.values()):
        return answers
    return None


def under_replicated(cluster: BrokerCluster) -> float:
    """kaska_under_replicated_partitions summed over the live brokers and groups."""
    total = 0.0
    for broker in cluster.live_ids():
        _text, samples = scrape(cluster.brokers[broker].metrics_port)
        total += sum(value for (name, _labels), value in samples.items()
                     if name == "kaska_under_replicated_partitions")
    return total


def test_a_killed_broker_leaves_every_isr_and_returns_after_its_restart(cluster, topic_name):
    ids = sorted(cluster.ids)
    wait_for(lambda: all(cluster.group_leader(g).leader_id == preferred_leader(g, ids)
                         for g in range(GROUPS)) or None, "every group led by its preferred broker")
    bootstrap = ",".join(cluster.kafka_address(i) for i in ids)
    create_topic(bootstrap, topic_name, PARTITIONS)
    produce(bootstrap, topic_name, [(i % PARTITIONS, None, b"before") for i in range(60)])
    before = wait_for(lambda: every_isr(cluster, topic_name, ids), "every broker in every ISR")
    assert all(replicas == ids for _l, replicas, _isr in before.values()), before
    assert {leader for leader, _r, _isr in before.values()} == set(ids), \
        f"the scenario: partitions led by all three brokers, {before}"
    assert under_replicated(cluster) == 0

    victim = before[0][0]
    followed = [p for p, (leader, _r, _isr) in before.items() if leader != victim]
    assert followed, before
    assert cluster.kill(victim, signal.SIGKILL) == -signal.SIGKILL
    survivors = [i for i in ids if i != victim]
    after_kill = wait_for(lambda: every_isr(cluster, topic_name, survivors),
                          f"broker {victim} out of every ISR",
                          timeout_s=REPLICA_LAG_TIME_MAX_S + 30)
    assert all(after_kill[p][0] == before[p][0] for p in followed), \
        f"the partitions broker {victim} followed kept their leaders: {after_kill}"
    assert all(replicas == ids for _l, replicas, _isr in after_kill.values()), \
        "the replicas are the group's voters, dead or alive"
    assert under_replicated(cluster) >= PARTITIONS
    # The survivors still take acks=all writes: a majority is in sync.
    produce(bootstrap, topic_name, [(i % PARTITIONS, None, b"while") for i in range(60)])

    cluster.start_broker(victim)
    wait_for(lambda: every_isr(cluster, topic_name, ids), f"broker {victim} back in every ISR",
             timeout_s=REPLICA_LAG_TIME_MAX_S + 60)
    wait_for(lambda: under_replicated(cluster) == 0, "no partition under-replicated")
