"""One local SparkSession for every Spark unit test of the run."""

import os

import pytest

# Spark binds its driver to this address; the project uses 127.0.0.1 only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

SHUFFLE_PARTITIONS = 2


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("flights-optimizer-unit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
