"""`--metrics-listen`: a real broker process serves Prometheus /metrics that follow its traffic."""

from __future__ import annotations

import socket
import time

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.record_batch import encode_batch
from scripts.launcher.ports import free_ports
from tests.integration.broker.broker_process import CLIENT_OPTIONS
from tests.integration.metrics_scrape import excerpt, scrape

pytestmark = pytest.mark.integration

BATCHES = 5
RECORDS_PER_BATCH = 40
COUNTED_WITHIN_S = 10.0


def test_broker_metrics_follow_produce_and_fetch(fresh_broker, topic_name):
    (port,) = free_ports(1)
    broker = fresh_broker("--metrics-listen", f"127.0.0.1:{port}")
    _, before = scrape(port)
    assert before[("kaska_produced_bytes_total", ())] == 0
    assert before[("kaska_replication_role", (("group", "0"), ("role", "leader")))] == 1

    with Admin(broker.address, **CLIENT_OPTIONS) as admin:
        admin.create_topic(topic_name, 1)
    batches = [[f"row {b}-{r}".encode() * 3 for r in range(RECORDS_PER_BATCH)]
               for b in range(BATCHES)]
    produced_bytes = 0
    with Producer(broker.address, **CLIENT_OPTIONS) as producer:
        for sequence, payloads in enumerate(batches):
            producer.send_batch(topic_name, 0, payloads)
            produced_bytes += len(encode_batch(payloads, producer_id=producer.producer_id,
                                               sequence=sequence))
    with Consumer(broker.address, **CLIENT_OPTIONS) as consumer:
        consumer.seek(topic_name, 0)
        got = [consumer.poll(5.0) for _ in range(BATCHES * RECORDS_PER_BATCH)]
    assert all(message is not None for message in got)

    records = BATCHES * RECORDS_PER_BATCH
    produce_ok = (("api", "produce"), ("code", "0"), ("error", "none"))
    fetched = ("kaska_fetched_records_total", (("api", "fetch"),))
    # An answer is counted once it went out whole, after the client may already hold it:
    # wait for the last ones to be counted (bounded), then check every figure.
    deadline = time.monotonic() + COUNTED_WITHIN_S
    while True:
        text, after = scrape(port)
        if (after.get(fetched, 0) >= records and after.get(("kaska_requests_total", produce_ok))
                == BATCHES) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    partition = (("partition", "0"), ("topic", topic_name))
    assert after[("kaska_produced_bytes_total", ())] == produced_bytes
    assert after[("kaska_produced_records_total", ())] == records
    assert after[("kaska_partition_log_end_offset", partition)] == records
    assert after[("kaska_partition_high_watermark", partition)] == records
    assert after[("kaska_fetched_records_total", (("api", "fetch"),))] >= records
    assert after[("kaska_fetched_bytes_total", (("api", "fetch"),))] >= produced_bytes
    assert after[("kaska_requests_total", produce_ok)] == BATCHES
    assert after[("kaska_replication_commit_index", (("group", "0"),))] > before[
        ("kaska_replication_commit_index", (("group", "0"),))]
    print(excerpt(text, "kaska_produced", "kaska_fetched", f'kaska_partition_log_end_offset{{'
                  f'partition="0",topic="{topic_name}"', f'kaska_partition_high_watermark{{'
                  f'partition="0",topic="{topic_name}"', 'kaska_requests_total{api="produce"',
                  "kaska_replication_role", "kaska_replication_epoch",
                  "kaska_replication_commit"))


def test_metrics_listen_taken_port_is_a_named_error(fresh_broker, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="MetricsBindError|cannot serve /metrics"):
            fresh_broker("--metrics-listen", f"127.0.0.1:{port}")
