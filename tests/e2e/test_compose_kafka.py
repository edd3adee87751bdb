"""Kafka's own clients on the host against the Compose deployment: each broker's Kafka listener
is published on 127.0.0.1 and advertised at that address, so a client that knows one broker
finds the rest and the leader through Metadata (docs/kafka.md). Runs on the suite's shared
deployment while its session is under way, and leaves it as it found it (one more topic)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest

from tests.integration.kafka.clients import create_topic, produce

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

READY_TIMEOUT_S = 300  # the brokers start with the whole deployment, JVMs beside them
KCAT_TIMEOUT_S = 60
RECORDS = 2_000
PARTITIONS = 3


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
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (metadata := cluster_metadata(first_only)) is None:
        assert time.monotonic() < deadline, (
            f"no Kafka Metadata with a controller from {first_only} in {READY_TIMEOUT_S} s\n"
            + deployment.diagnostics(tail_lines=30))
        time.sleep(1.0)
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
