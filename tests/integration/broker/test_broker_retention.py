"""Retention in a running broker: old segments go, readers behind them are told so."""

import time

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import OffsetOutOfRangeError
from tests.integration.broker.broker_process import CLIENT_OPTIONS

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 64 * 1024


def test_retention_by_size_moves_the_log_start(fresh_broker, topic_name):
    broker = fresh_broker("--segment-bytes-max", str(SEGMENT_BYTES),
                          "--frame-bytes-max", str(SEGMENT_BYTES // 2),
                          "--retention-bytes", str(SEGMENT_BYTES),
                          "--retention-check-interval-ms", "50")
    with Admin(broker.address, **CLIENT_OPTIONS) as admin, \
            Producer(broker.address, **CLIENT_OPTIONS) as producer, \
            Consumer(broker.address, **CLIENT_OPTIONS) as consumer:
        admin.create_topic(topic_name)
        for i in range(40):  # 40 x 10 KiB: about six segments
            producer.send_msg(topic_name, bytes([i]) * 10_000)
        deadline = time.monotonic() + 10
        # The retention thread runs on its own clock; poll the visible effect over the wire.
        while consumer.start_offset(topic_name) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        start = consumer.start_offset(topic_name)
        assert 0 < start < 40 and consumer.end_offset(topic_name) == 40
        consumer.seek(topic_name, 0)
        with pytest.raises(OffsetOutOfRangeError):
            consumer.poll(0)
        consumer.seek(topic_name, start)
        assert consumer.poll(5).value == bytes([start]) * 10_000
