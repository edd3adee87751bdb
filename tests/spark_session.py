"""The SparkSession the tests share: local[2], few shuffle partitions, no UI, 127.0.0.1 only."""

import os

# Spark binds its driver to this address; the project uses 127.0.0.1 only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

SHUFFLE_PARTITIONS = 2


def local_spark_session(app_name: str):
    """The run's one SparkSession (getOrCreate: unit and integration fixtures get the same)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
