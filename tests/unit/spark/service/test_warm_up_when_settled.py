"""The settled warm-up (spark/service/driver.py): it waits for a first executor and the settle time
on its own thread, runs in its own FAIR pool, and is skipped when a session job already runs or
the service stops. A fake Spark context stands in; `warm_up` itself is spark/service/warm_up.py's
(test_warm_up.py runs it for real)."""

import threading

import pytest

from spark.service import driver

WAIT_S = 10.0


class FakeTracker:
    def __init__(self) -> None:
        self.executors = 1  # the driver alone

    def getExecutorInfos(self) -> list:  # noqa: N802 (Spark's name)
        return [object()] * self.executors


class FakeContext:
    def __init__(self, master: str) -> None:
        self.master = master
        self.tracker = FakeTracker()
        self.pools: list[str | None] = []

    def statusTracker(self) -> FakeTracker:  # noqa: N802 (Spark's name)
        return self.tracker

    def setLocalProperty(self, key: str, value: str | None) -> None:  # noqa: N802
        assert key == "spark.scheduler.pool"
        self.pools.append(value)


class FakeSpark:
    def __init__(self, master: str = "spark://master:7077") -> None:
        self.sparkContext = FakeContext(master)  # noqa: N815 (Spark's name)


@pytest.fixture
def warmed(monkeypatch):
    """Records each warm-up (its thread's pool) instead of running Q1-Q4."""
    calls: list[int] = []
    done = threading.Event()

    def fake_warm_up_quietly(spark, rows: int) -> bool:
        calls.append(rows)
        done.set()
        return True

    monkeypatch.setattr(driver, "warm_up_quietly", fake_warm_up_quietly)
    monkeypatch.setattr(driver, "SETTLE_POLL_S", 0.01)
    monkeypatch.setattr(driver, "IDLE_FIRST_S", 0.0)
    return calls, done


def test_waits_for_a_first_executor_then_warms_up_in_its_own_pool(warmed):
    calls, done = warmed
    spark = FakeSpark()
    thread = driver.warm_up_when_settled(spark, 500, 0.0, threading.Event(), lambda: False)
    assert not done.wait(0.2), "no executor yet: no warm-up"
    spark.sparkContext.tracker.executors = 2
    assert done.wait(WAIT_S)
    thread.join(WAIT_S)
    assert calls == [500] and spark.sparkContext.pools == [driver.WARM_UP_POOL]


def test_idle_passes_follow_the_settled_warm_up_on_its_thread(warmed):
    calls, _done = warmed
    spark = FakeSpark("local[2]")
    thread = driver.warm_up_when_settled(spark, 500, 0.0, threading.Event(), lambda: False,
                                         idle_passes=3)
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert calls == [500, *[driver.IDLE_PASS_ROWS] * 3]
    assert spark.sparkContext.pools == [driver.WARM_UP_POOL]


def test_local_mode_needs_no_executor(warmed):
    calls, done = warmed
    driver.warm_up_when_settled(FakeSpark("local[2]"), 7, 0.0, threading.Event(), lambda: False)
    assert done.wait(WAIT_S) and calls == [7]


def test_skipped_when_a_session_job_already_runs(warmed):
    calls, _done = warmed
    spark = FakeSpark()
    spark.sparkContext.tracker.executors = 3
    asked = threading.Event()

    def busy() -> bool:
        asked.set()
        return True

    thread = driver.warm_up_when_settled(spark, 500, 0.0, threading.Event(), busy)
    thread.join(WAIT_S)
    assert asked.is_set() and not thread.is_alive() and calls == []


def test_a_stop_ends_the_wait_and_no_rows_means_no_thread(warmed):
    calls, _done = warmed
    stop = threading.Event()
    thread = driver.warm_up_when_settled(FakeSpark(), 500, 0.0, stop, lambda: False)
    stop.set()
    thread.join(WAIT_S)
    assert not thread.is_alive() and calls == []
    assert driver.warm_up_when_settled(FakeSpark(), 0, 0.0, stop, lambda: False) is None


def test_no_executor_within_the_bound_serves_cold(warmed):
    calls, _done = warmed
    thread = driver.warm_up_when_settled(FakeSpark(), 500, 0.0, threading.Event(),
                                         lambda: False, settle_s_max=0.05)
    thread.join(WAIT_S)
    assert not thread.is_alive() and calls == []
