"""Fixtures of the Kafka-client tests: one broker per module, clusters per test; a failed
test's report ends with the tail of every broker's log."""

from __future__ import annotations

import itertools
import uuid

import pytest

from common.address import Address
from scripts.launcher.ports import free_ports
from tests.integration.kafka.kafka_broker import KafkaBroker
from tests.integration.replication.cluster import FAST_ELECTIONS, BrokerCluster

LOG_TAIL_BYTES = 6000
_names = itertools.count()
_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    (metrics_port,) = free_ports(1)
    process = KafkaBroker(tmp_path_factory.mktemp("kafka") / "data",
                          metrics_listen=Address("127.0.0.1", metrics_port)).start()
    yield process
    process.kill()


@pytest.fixture
def kafka_cluster(tmp_path, request):
    cluster = BrokerCluster(tmp_path / "cluster", size=3, kafka=True,
                            extra_args=FAST_ELECTIONS).start()
    yield cluster
    cluster.close()
    if request.node.stash.get(_FAILED, False):
        for i, path in cluster.log_paths().items():
            tail = path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace") \
                if path.exists() else "(no log)"
            print(f"\n----- broker {i} log ({path}), last {LOG_TAIL_BYTES} bytes -----\n{tail}")


@pytest.fixture
def topic_name():
    return f"k{next(_names)}-{uuid.uuid4().hex[:8]}"
