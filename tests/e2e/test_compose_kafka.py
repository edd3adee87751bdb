"""Kafka's own clients against the Compose deployment's two named Kafka listeners (docs/kafka.md):
on the host through each broker's EXTERNAL listener, published on 127.0.0.1 and advertised at
that address, and in a container on the Compose network through INTERNAL, advertised by service
name; either way a client that knows one broker finds the rest and the leader through Metadata.
Runs on the suite's shared deployment while its session is under way, and leaves it as it found
it (two more topics)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest

from scripts.deploy.compose_file import PORTS
from scripts.deploy.deployment import ComposeDeployment
from tests.integration.kafka.clients import create_topic, produce

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

READY_TIMEOUT_S = 300  # the brokers start with the whole deployment, JVMs beside them
KCAT_TIMEOUT_S = 60
RECORDS = 2_000
PARTITIONS = 3
INTERNAL_PORT = PORTS["kafka"]  # each broker's INTERNAL listener, inside the network
RECORDS_INSIDE = 300


def kcat(*args: str) -> str:
    assert shutil.which("kcat"), "kcat is not installed (.ci/run installs it: apt-get install kcat)"
    done = subprocess.run(["kcat", *args], capture_output=True, text=True,
                          timeout=KCAT_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def cluster_metadata(bootstrap: str) -> dict | None:
    """kcat's Metadata answer, or None while the cluster has no leader (controller -1) or
    does not answer yet."""
    done = subprocess.run(["kcat", "-b", bootstrap, "-L", "-J", "-m", "5"], capture_output=True,
                          text=True, timeout=KCAT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        return None
    metadata = json.loads(done.stdout)
    return metadata if metadata.get("controllerid", -1) >= 0 else None


def session_records(bootstrap: str) -> list[tuple[int, int]]:
    """(offset, value bytes) of the `sessions` topic's records through kcat; [] while the
    topic does not exist yet."""
    done = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "sessions", "-o", "beginning",
                           "-e", "-f", "%o %S\\n"], capture_output=True, text=True,
                          timeout=KCAT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        return []
    return [tuple(map(int, line.split())) for line in done.stdout.splitlines()]


def test_kcat_and_confluent_kafka_on_the_host_produce_and_consume_through_the_published_ports(
        shared_deployment):
    deployment = shared_deployment
    published = deployment.kafka_bootstrap.split(",")
    assert len(published) == 3
    first_only = published[0]  # what a user types; Metadata must lead the client to the rest
    metadata = wait_for_metadata(lambda: cluster_metadata(first_only), first_only, deployment)
    advertised = {broker["id"]: broker["name"] for broker in metadata["brokers"]}
    assert advertised == {i: address for i, address in enumerate(published, start=1)}, (
        "each broker must advertise its published host address")

    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    create_topic(first_only, topic, PARTITIONS)
    records = [(index % PARTITIONS, f"k{index}".encode(), f"v{index}".encode())
               for index in range(RECORDS)]
    acknowledged = produce(first_only, topic, records)  # idempotent, acks=all
    assert len(set(acknowledged)) == RECORDS

    lines = kcat("-b", first_only, "-C", "-t", topic, "-o", "beginning", "-e",
                 "-c", str(RECORDS), "-f", "%p %o %k %s\\n").splitlines()
    consumed = {(int(p), int(o)): (k, v) for p, o, k, v in (line.split(" ") for line in lines)}
    assert len(lines) == RECORDS, f"{len(lines)} records consumed, {RECORDS} produced"
    expected = {where: (key.decode(), value.decode())
                for where, (_partition, key, value) in zip(acknowledged, records, strict=True)}
    assert consumed == expected

    # The pipeline's own topic, written by the client through Kaska's protocol, read through
    # Kafka's: one log, two protocols.
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not (sessions := session_records(first_only)):
        assert time.monotonic() < deadline, "no record in the sessions topic through Kafka"
        time.sleep(1.0)
    assert [offset for offset, _size in sessions] == list(range(len(sessions)))
    assert all(size > 0 for _offset, size in sessions)

    described = kcat("-b", first_only, "-L", "-J", "-t", topic)
    partitions = json.loads(described)["topics"][0]["partitions"]
    assert sorted(p["partition"] for p in partitions) == list(range(PARTITIONS))
    assert all(p["leader"] in advertised for p in partitions)


def kcat_in_network(deployment: ComposeDeployment, *args: str,
                    stdin: str | None = None) -> subprocess.CompletedProcess:
    """kcat (the image has it) in a throwaway container of the project image on the
    deployment's network, where the brokers are known by their service names."""
    return subprocess.run(["docker", "run", "--rm", "-i", "--network", deployment.network,
                           "--entrypoint", "kcat", deployment.image, *args], input=stdin,
                          capture_output=True, text=True, timeout=KCAT_TIMEOUT_S, check=False)


def network_metadata(deployment: ComposeDeployment, bootstrap: str) -> dict | None:
    """kcat's Metadata answer from inside the network, or None as `cluster_metadata`."""
    done = kcat_in_network(deployment, "-b", bootstrap, "-L", "-J", "-m", "5")
    if done.returncode != 0:
        return None
    metadata = json.loads(done.stdout)
    return metadata if metadata.get("controllerid", -1) >= 0 else None


def wait_for_metadata(read, what: str, deployment: ComposeDeployment) -> dict:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (metadata := read()) is None:
        assert time.monotonic() < deadline, (
            f"no Kafka Metadata with a controller from {what} in {READY_TIMEOUT_S} s\n"
            + deployment.diagnostics(tail_lines=30))
        time.sleep(1.0)
    return metadata


def test_kcat_reaches_every_broker_inside_the_network_by_name_and_from_the_host_by_port(
        shared_deployment):
    deployment = shared_deployment
    internal = {i: f"broker-{i}:{INTERNAL_PORT}" for i in deployment.brokers}
    published = dict(zip(deployment.brokers, deployment.kafka_bootstrap.split(","), strict=True))
    for i in deployment.brokers:  # each broker answers on each listener, with its addresses
        inside = wait_for_metadata(lambda i=i: network_metadata(deployment, internal[i]),
                                   f"{internal[i]} inside the network", deployment)
        assert {b["id"]: b["name"] for b in inside["brokers"]} == internal
        outside = wait_for_metadata(lambda i=i: cluster_metadata(published[i]),
                                    f"{published[i]} on the host", deployment)
        assert {b["id"]: b["name"] for b in outside["brokers"]} == published

    topic = f"inside-{uuid.uuid4().hex[:8]}"
    create_topic(published[1], topic, PARTITIONS)
    lines = [f"inside-{n}" for n in range(RECORDS_INSIDE)]
    # Keyless records go to random partitions, so to their leaders, by their INTERNAL names.
    produced = kcat_in_network(deployment, "-b", internal[1], "-P", "-t", topic,
                               stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, f"kcat -P in the network: {produced.stderr}"
    last = deployment.brokers[-1]
    consumed = kcat_in_network(deployment, "-b", internal[last], "-C", "-t", topic, "-o",
                               "beginning", "-e", "-c", str(RECORDS_INSIDE), "-f", "%s\\n")
    assert consumed.returncode == 0, f"kcat -C in the network: {consumed.stderr}"
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)
    # The same records through EXTERNAL from the host: one log behind both listeners.
    on_host = kcat("-b", published[last], "-C", "-t", topic, "-o", "beginning", "-e", "-c",
                   str(RECORDS_INSIDE), "-f", "%s\\n")
    assert sorted(on_host.splitlines()) == sorted(lines)
