"""The query tests' two paths (the `spark` session fixture: tests/unit/conftest.py)."""

import pytest


@pytest.fixture(scope="module", params=["spark", "derived"])
def query_path(request):
    """Both ways a frame's query fields are computed (rules/spark_test_frames.compute)."""
    return request.param
