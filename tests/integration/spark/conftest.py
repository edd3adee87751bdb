"""Fixtures for the Spark integration tests: one local SparkSession with the `kaska` source,
one broker per module, and rows produced the way clients produce them."""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest

from tests.integration.broker.broker_process import BrokerProcess
from tests.integration.spark.service_process import ServiceProcess
from tests.spark_session import local_spark_session

REPO = Path(__file__).resolve().parents[3]
# Python workers and the streaming source runner are started by the JVM: they need the tree
# on their path.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
    from spark.source.kaska_source import register

    session = local_spark_session("flights-optimizer-integration-tests")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield process
    process.kill()


@pytest.fixture
def topic_name():
    """A topic name no other test uses, shaped like a session's data topic."""
    return f"flights.t{next(_names)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def services(tmp_path, broker):
    """`services(*extra_args)` starts a query service against `broker` (the module's, or a
    test module's own); every one started is killed afterwards."""
    started: list[ServiceProcess] = []

    def start(*extra_args: str) -> ServiceProcess:
        service = ServiceProcess(broker.address, tmp_path / "service.log", *extra_args).start()
        started.append(service)
        return service

    yield start
    for service in started:
        service.kill9()
