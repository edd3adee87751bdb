"""Fixtures for the Spark integration tests: one local SparkSession with the `kaska` source,
one broker per module, and rows produced the way clients produce them."""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest

from tests.integration.broker.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[3]
# Spark binds its driver to this address; the project uses 127.0.0.1 only. Python workers and
# the streaming source runner are started by the JVM: they need the tree on their path.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

SHUFFLE_PARTITIONS = 2
_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from spark.kaska_source import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("flights-optimizer-integration-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
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
