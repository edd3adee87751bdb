"""One local SparkSession for every unit test of the run that asks for `spark` (the query
rules' tests under spark/, the Spark-on-CSV benchmark path's under scripts/bench/); created
on first use only."""

import pytest

from tests.spark_session import local_spark_session


@pytest.fixture(scope="session")
def spark():
    session = local_spark_session("flights-optimizer-unit-tests")
    yield session
    session.stop()
