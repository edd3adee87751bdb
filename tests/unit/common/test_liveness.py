"""Liveness and HealthCheck (common/liveness.py) and the /healthz dispatcher in front of the
metrics app (common/metrics_http.py). The clock is stepped by hand: nothing sleeps."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from common.liveness import HealthCheck, Liveness
from common.metrics_http import MetricsEndpoint, health_app


class StepClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_loop_is_fresh_until_it_stays_untouched_past_the_bound():
    clock = StepClock()
    loop = Liveness("replication loop", clock)
    check = HealthCheck.of(loop, stale_after_s=10.0)
    clock.now_s += 10.0
    assert check.problem() is None  # exactly at the bound: still fresh
    clock.now_s += 0.5
    assert check.problem() == ("replication loop made no progress for 10.5 s "
                               "(stale after 10 s)")
    loop.touch()
    assert loop.age_s() == 0.0 and check.problem() is None


def test_the_first_stale_loop_and_then_the_ready_condition_are_reported():
    clock = StepClock()
    first, second = Liveness("election loop", clock), Liveness("supervision loop", clock)
    waiting = ["not started yet"]
    check = HealthCheck(lambda: (first, second), 5.0, ready=lambda: waiting[0])
    assert check.problem() == "not started yet"
    waiting[0] = None
    assert check.problem() is None
    clock.now_s += 6.0
    first.touch()
    assert check.problem().startswith("supervision loop made no progress for 6.0 s")


def _call(app, path: str) -> tuple[str, bytes]:
    answers = []
    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"},
                        lambda status, headers: answers.append(status)))
    return answers[0], body


def test_dispatcher_answers_healthz_and_passes_everything_else_to_metrics():
    clock = StepClock()
    loop = Liveness("session loop", clock)
    seen = []

    def metrics_app(environ, start_response):
        seen.append(environ["PATH_INFO"])
        start_response("200 OK", [])
        return [b"metrics"]

    app = health_app(metrics_app, HealthCheck.of(loop, stale_after_s=3.0))
    assert _call(app, "/healthz") == ("200 OK", b"ok\n")
    clock.now_s += 4.0
    status, body = _call(app, "/healthz")
    assert status == "503 Service Unavailable"
    assert body == b"session loop made no progress for 4.0 s (stale after 3 s)\n"
    assert _call(app, "/metrics") == ("200 OK", b"metrics")
    assert seen == ["/metrics"]
    assert _call(health_app(metrics_app, None), "/healthz") == ("200 OK", b"ok\n")


def test_endpoint_serves_healthz_and_metrics_on_one_port():
    clock = StepClock()
    loop = Liveness("replication loop", clock)
    registry = CollectorRegistry(auto_describe=False)
    Counter("demo_turns", "Turns.", registry=registry).inc()
    endpoint = MetricsEndpoint(("127.0.0.1", 0), registry,
                               HealthCheck.of(loop, stale_after_s=10.0)).start()
    host, port = endpoint.address
    base = f"http://{host}:{port}"
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert (answer.status, answer.read()) == (200, b"ok\n")
        clock.now_s += 11.0
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert refused.value.code == 503
        assert b"replication loop made no progress" in refused.value.read()
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:
            assert "demo_turns_total 1.0" in answer.read().decode()
    finally:
        endpoint.stop()
