import pytest

from services.broker.storage.config import LogConfig


def test_defaults_are_kafka_like():
    config = LogConfig()
    assert config.segment_bytes_max == 64 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.retention_bytes is None and config.retention_ms is None
    assert config.flush_interval_ms is None


@pytest.mark.parametrize("kwargs", [
    {"segment_bytes_max": 1000, "batch_bytes_max": 1000},      # one batch must fit
    {"segment_bytes_max": 2**32, "batch_bytes_max": 1024},     # u32 index positions
    {"batch_bytes_max": 10},                                    # below a batch header
    {"index_interval_bytes": 0},
    {"retention_bytes": -1},
    {"retention_ms": -5},
    {"flush_interval_ms": -1},
    {"producer_ids_max": 0},
])
def test_rejects_impossible_bounds(kwargs):
    with pytest.raises(ValueError):
        LogConfig(**kwargs)
