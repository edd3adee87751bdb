"""The query service's metrics (spark/service/metrics.py): job timing by outcome, rows, the
collector's families from a fake service, and the `--metrics-listen` flag. No Spark needed."""

from __future__ import annotations

import pytest

from spark.service.__main__ import parse_args
from spark.service.metrics import (
    JOB_BUCKETS_S,
    OUTCOME_DONE,
    OUTCOME_FAILED,
    OUTCOME_INTERRUPTED,
    JobMetrics,
)
from spark.service.result_writer import ResultWriteInterruptedError
from spark.service.session_job import JobReport
from tests.unit.metrics_fakes import (
    FakeClock,
    fake_query_service_registry,
    families,
    histogram_values,
    sample_values,
)

JOB = "query_service_job_seconds"


def test_timed_job_by_outcome():
    clock = FakeClock()
    metrics = JobMetrics(clock=clock)
    seen_running = []

    def done():
        seen_running.append(metrics.snapshot()[0])
        clock.now_s += 2.0
        return JobReport("c", rows=10, query_rows={"q1": 1, "q2": 2})

    def interrupted():
        clock.now_s += 0.5
        raise ResultWriteInterruptedError("stop")

    def failed():
        clock.now_s += 1.0
        raise ValueError("broker gone")

    assert metrics.timed_job(done).rows == 10
    with pytest.raises(ResultWriteInterruptedError):
        metrics.timed_job(interrupted)
    with pytest.raises(ValueError):
        metrics.timed_job(failed)
    metrics.timed_job(done)
    assert seen_running == [1, 1]
    running, input_rows, result_rows = metrics.snapshot()
    assert (running, input_rows, result_rows) == (0, 20, {"q1": 2, "q2": 4})
    seconds = histogram_values(metrics.job_seconds)
    outcomes = (OUTCOME_DONE, OUTCOME_FAILED, OUTCOME_INTERRUPTED)
    sums = {o: seconds[(f"{JOB}_sum", (("outcome", o),))] for o in outcomes}
    assert sums == {OUTCOME_DONE: 4.0, OUTCOME_FAILED: 1.0, OUTCOME_INTERRUPTED: 0.5}
    counts = {o: seconds[(f"{JOB}_count", (("outcome", o),))] for o in outcomes}
    assert counts == {OUTCOME_DONE: 2, OUTCOME_FAILED: 1, OUTCOME_INTERRUPTED: 1}
    assert seconds[(f"{JOB}_bucket", (("le", "0.5"), ("outcome", OUTCOME_INTERRUPTED)))] == 1
    assert seconds[(f"{JOB}_bucket", (("le", "1.0"), ("outcome", OUTCOME_DONE)))] == 0
    assert seconds[(f"{JOB}_bucket", (("le", "2.0"), ("outcome", OUTCOME_DONE)))] == 2


def test_a_clock_step_back_times_a_job_at_zero():
    clock = FakeClock()
    metrics = JobMetrics(clock=clock)

    def stepped_back():
        clock.now_s -= 3.0
        return JobReport("c", rows=1, query_rows={})

    metrics.timed_job(stepped_back)
    seconds = histogram_values(metrics.job_seconds)
    assert seconds[(f"{JOB}_sum", (("outcome", OUTCOME_DONE),))] == 0.0
    assert seconds[(f"{JOB}_count", (("outcome", OUTCOME_DONE),))] == 1


def test_collector_families():
    found = families(fake_query_service_registry())
    assert sample_values(found["query_service_sessions_started"]) == {
        ("query_service_sessions_started_total", ()): 2}
    completed = sample_values(found["query_service_sessions_completed"])
    assert completed[("query_service_sessions_completed_total", (("outcome", "done"),))] == 1
    assert found["query_service_job_seconds"].type == "histogram"
    seconds = sample_values(found["query_service_job_seconds"])
    assert seconds[("query_service_job_seconds_count", (("outcome", "done"),))] == 1
    assert seconds[("query_service_job_seconds_sum", (("outcome", "done"),))] == 3.0
    assert seconds[("query_service_job_seconds_count", (("outcome", "failed"),))] == 1
    assert seconds[("query_service_job_seconds_count", (("outcome", "interrupted"),))] == 0
    bounds = [s.labels["le"] for s in found["query_service_job_seconds"].samples
              if s.name == "query_service_job_seconds_bucket" and s.labels["outcome"] == "done"]
    assert bounds == [str(bound) for bound in JOB_BUCKETS_S] + ["+Inf"]
    assert not any(name.endswith("_created") for name in found)
    rows = sample_values(found["query_service_result_rows"])
    assert rows[("query_service_result_rows_total", (("query", "q1"),))] == 7
    assert sample_values(found["query_service_input_rows"]) == {
        ("query_service_input_rows_total", ()): 100}
    assert found["query_service_jobs_running"].type == "gauge"
    assert sample_values(found["query_service_session_topics_deleted"]) == {
        ("query_service_session_topics_deleted_total", ()): 3}
    assert sample_values(found["query_service_sessions_cleaned"]) == {
        ("query_service_sessions_cleaned_total", ()): 1}
    assert sample_values(found["query_service_sessions_acked"]) == {
        ("query_service_sessions_acked_total", ()): 1}
    assert found["query_service_sessions_pending"].type == "gauge"
    assert sample_values(found["query_service_sessions_pending"]) == {
        ("query_service_sessions_pending", ()): 2}


def test_metrics_listen_flag():
    assert parse_args(["--brokers", "b:1"]).metrics_listen is None
    settings = parse_args(["--brokers", "b:1", "--metrics-listen", "0.0.0.0:9402"])
    assert settings.metrics_listen == ("0.0.0.0", 9402)


def test_bad_metrics_listen_exits_2_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--brokers", "b:1", "--metrics-listen", "host:70000"])
    assert exited.value.code == 2
    assert "--metrics-listen: MetricsListenError" in capsys.readouterr().err
