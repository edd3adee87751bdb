"""Named Kafka listeners (docs/kafka.md, "Named listeners"): one broker process with two, as the
Compose deployment runs them. INTERNAL is bound on 127.0.0.1:a and advertises that; EXTERNAL is
bound on 127.0.0.1:b and reached through a forwarding proxy on 127.0.0.1:p (as Docker publishes
a container's port on the host), so it advertises localhost:p. Each listener's Metadata names
that listener's address, and confluent-kafka produces and consumes through each: a client of
EXTERNAL that ignored the advertised address would bypass the proxy."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from kafka.protocol.metadata import MetadataRequest

from common.address import Address
from scripts.launcher.ports import free_ports
from scripts.nemesis.proxy import PeerProxy
from tests.integration.broker.broker_process import BrokerProcess
from tests.integration.kafka.clients import (
    CLIENT_TIMEOUT_S,
    consume_from_start,
    create_topic,
    produce,
)
from tests.integration.kafka.kafka_broker import kafka_request

pytestmark = pytest.mark.integration

RECORDS_PER_LISTENER = 200


@pytest.fixture
def two_listeners(tmp_path):
    """(broker, INTERNAL's address, EXTERNAL's advertised address, the proxy in front of it)."""
    internal, external = free_ports(2)
    proxy = PeerProxy(("127.0.0.1", external), name="published")
    broker = BrokerProcess(
        tmp_path / "data",
        "--kafka-listeners",
        f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "--kafka-advertised-listeners",
        f"EXTERNAL://localhost:{proxy.port}",
        "--kafka-listener-security-protocol-map",
        "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    )
    try:
        broker.start()
        yield broker, Address("127.0.0.1", internal), Address("localhost", proxy.port), proxy
    finally:
        broker.kill()
        proxy.close()


def advertised(bootstrap: str) -> list[tuple[int, str, int]]:
    response = kafka_request(
        bootstrap,
        MetadataRequest[9](
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    return [(b.node_id, b.host, b.port) for b in response.brokers]


def assert_through_proxy(connections: int, external: bool) -> None:
    """A client of EXTERNAL opens its bootstrap connection, then at least one to the
    advertised address (librdkafka: one per broker it learnt of, and one to the group
    coordinator), all through the proxy; a client of INTERNAL never goes near it."""
    if external:
        assert connections >= 2, "EXTERNAL's clients bypassed its advertised address"
    else:
        assert connections == 0, "INTERNAL's clients were sent to EXTERNAL's address"


def test_each_listener_advertises_its_own_address_and_serves_clients(two_listeners, topic_name):
    broker, internal, external, proxy = two_listeners
    announced = [broker.proc.stdout.readline().decode().strip() for _ in range(2)]
    assert announced == [
        f"kafka listener INTERNAL of broker 1 on {internal}",
        f"kafka listener EXTERNAL of broker 1 on 127.0.0.1:{proxy.upstream[1]}",
    ]
    # Bootstrapped by IP, told the name: a client that follows Metadata opens a second
    # connection, to the advertised address.
    external_bootstrap = f"127.0.0.1:{external.port}"
    assert advertised(str(internal)) == [(1, internal.host, internal.port)]
    assert advertised(external_bootstrap) == [(1, external.host, external.port)]
    seen = (
        AdminClient({"bootstrap.servers": external_bootstrap})
        .list_topics(timeout=CLIENT_TIMEOUT_S)
        .brokers
    )
    assert {i: (b.host, b.port) for i, b in seen.items()} == {1: (external.host, external.port)}

    create_topic(str(internal), topic_name, 1)
    values = {
        bootstrap: [f"{name}-{i}".encode() for i in range(RECORDS_PER_LISTENER)]
        for name, bootstrap in (("internal", str(internal)), ("external", external_bootstrap))
    }
    for bootstrap, produced in values.items():
        forwarded = proxy.connections
        produce(bootstrap, topic_name, [(0, None, value) for value in produced])
        assert_through_proxy(proxy.connections - forwarded, bootstrap == external_bootstrap)
    every = {value for produced in values.values() for value in produced}
    for bootstrap in values:
        forwarded = proxy.connections
        consumed = consume_from_start(bootstrap, topic_name, 1, len(every))
        assert [offset for _p, offset, _k, _v in consumed] == list(range(len(every)))
        assert {value for *_rest, value in consumed} == every
        assert_through_proxy(proxy.connections - forwarded, bootstrap == external_bootstrap)
