"""`--metrics-listen` parsing and the endpoint shared by every service (common/metrics_http.py),
including how it exports the services' histograms."""

from __future__ import annotations

import argparse
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Histogram, enable_created_metrics
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from common.metrics_http import (
    MetricsBindError,
    MetricsEndpoint,
    MetricsListenError,
    metrics_listen_arg,
    parse_metrics_listen,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9400", ("127.0.0.1", 9400)),
    ("0.0.0.0:0", ("0.0.0.0", 0)),
    ("broker-1:65535", ("broker-1", 65535)),
    ("[::1]:9400", ("::1", 9400)),
    (" localhost:80 ", ("localhost", 80)),
])
def test_parse_metrics_listen(text, expected):
    assert parse_metrics_listen(text) == expected


@pytest.mark.parametrize(("text", "reason"), [
    ("127.0.0.1", "no ':'"),
    (":9400", "host is empty"),
    ("[]:9400", "host is empty"),
    ("host:", "port"),
    ("host:http", "port"),
    ("host:65536", "0..65535"),
    ("host:-1", "port"),
])
def test_bad_metrics_listen_is_a_named_error(text, reason):
    with pytest.raises(MetricsListenError, match=reason) as caught:
        parse_metrics_listen(text)
    assert caught.value.value == text
    assert reason in caught.value.reason
    assert isinstance(caught.value, ValueError)


def test_metrics_listen_arg_names_the_error_for_argparse():
    with pytest.raises(argparse.ArgumentTypeError, match="MetricsListenError: 'nope'"):
        metrics_listen_arg("nope")


class _OneCounter(Collector):
    def collect(self):
        yield CounterMetricFamily("demo_things", "Things.", value=3)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OneCounter())
    return registry


def test_endpoint_serves_its_registry_and_stops():
    endpoint = MetricsEndpoint(("127.0.0.1", 0), _registry()).start()
    host, port = endpoint.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    finally:
        endpoint.stop()
    assert "demo_things_total 3.0" in text
    with socket.socket() as probe:  # nothing listens any more: stop() closed the socket
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of the scrape
        probe.bind((host, port))
        probe.listen()


def test_endpoint_is_off_without_the_flag():
    built = []
    assert MetricsEndpoint.start_optional(None, lambda: built.append(1)) is None
    assert not built


def test_taken_port_is_a_named_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsBindError, match=f"127.0.0.1:{port}") as caught:
            MetricsEndpoint(("127.0.0.1", port), _registry()).start()
    assert caught.value.port == port and isinstance(caught.value.cause, OSError)


def _scrape(endpoint: MetricsEndpoint, accept: str | None = None) -> str:
    host, port = endpoint.address
    request = urllib.request.Request(f"http://{host}:{port}/metrics",
                                     headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return answer.read().decode()


def test_endpoint_serves_histograms_without_created_series():
    """A service's `prometheus_client.Histogram`: cumulative, le-inclusive buckets, count and
    sum, and no `_created` series (the endpoint turns them off, in either format)."""
    enable_created_metrics()  # as if nothing had turned them off yet in this process
    registry = CollectorRegistry(auto_describe=False)
    histogram = Histogram("demo_wait_seconds", "Waits.", ["kind"], buckets=(0.1, 1.0),
                          registry=registry)
    for seconds in (0.05, 0.1, 0.5, 1.0, 7.0, 0.0):
        histogram.labels("x").observe(seconds)
    endpoint = MetricsEndpoint(("127.0.0.1", 0), registry).start()
    try:
        text = _scrape(endpoint)
        openmetrics = _scrape(endpoint, "application/openmetrics-text; version=1.0.0")
    finally:
        endpoint.stop()
    assert "_created" not in text and "_created" not in openmetrics
    (parsed,) = text_string_to_metric_families(text)
    assert (parsed.name, parsed.type) == ("demo_wait_seconds", "histogram")
    values = {(s.name, s.labels.get("le")): s.value for s in parsed.samples}
    assert values == {("demo_wait_seconds_bucket", "0.1"): 3,
                      ("demo_wait_seconds_bucket", "1.0"): 5,
                      ("demo_wait_seconds_bucket", "+Inf"): 6,
                      ("demo_wait_seconds_count", None): 6,
                      ("demo_wait_seconds_sum", None): pytest.approx(8.65)}
    assert all(s.labels["kind"] == "x" for s in parsed.samples)
