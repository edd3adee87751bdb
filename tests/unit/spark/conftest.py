"""One local SparkSession for every Spark unit test of the run."""

import pytest

from tests.spark_session import local_spark_session


@pytest.fixture(scope="session")
def spark():
    session = local_spark_session("flights-optimizer-unit-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module", params=["spark", "derived"])
def query_path(request):
    """Both ways a frame's query fields are computed (spark_test_frames.compute)."""
    return request.param
