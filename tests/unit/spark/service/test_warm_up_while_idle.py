"""The idle warm-up passes (spark/service/driver.py `warm_up_while_idle`): each pass starts only
while no session job runs and the service is not stopping; the first session job, a stop or a failed
pass ends them for good. Stepped by hand: the pass is a function the test counts."""

from __future__ import annotations

import threading

from spark.service import driver

WAIT_S = 10.0


class Passes:
    """A pass that records itself and, after `busy_after` passes, makes the service busy."""

    def __init__(self, busy_after: int | None = None, fail_at: int | None = None) -> None:
        self.ran = 0
        self.busy_after = busy_after
        self.fail_at = fail_at

    def run(self) -> bool:
        self.ran += 1
        return self.ran != self.fail_at

    def busy(self) -> bool:
        return self.busy_after is not None and self.ran >= self.busy_after


def test_every_pass_runs_while_the_service_stays_idle():
    passes = Passes()
    assert driver.warm_up_while_idle(passes.run, 6, threading.Event(), passes.busy) == 6
    assert passes.ran == 6


def test_a_session_job_ends_the_passes_before_the_next_one():
    passes = Passes(busy_after=2)
    assert driver.warm_up_while_idle(passes.run, 6, threading.Event(), passes.busy) == 2
    assert passes.ran == 2


def test_a_busy_service_runs_no_pass_and_a_stop_none_either():
    passes = Passes(busy_after=0)
    assert driver.warm_up_while_idle(passes.run, 6, threading.Event(), passes.busy) == 0
    stop = threading.Event()
    stop.set()
    idle = Passes()
    assert driver.warm_up_while_idle(idle.run, 6, stop, idle.busy) == 0
    assert passes.ran == idle.ran == 0


def test_a_session_seen_during_the_first_idle_wait_means_no_pass():
    """The service is busy by the time the wait ends (a client started with the service):
    the wait is `stop.wait`, so a stop ends it too, at once."""
    seen = threading.Event()
    ran: list[int] = []

    class WaitThenSee(threading.Event):
        def wait(self, timeout=None) -> bool:
            seen.set()  # a session record arrives while the service waits
            return False

    count = driver.warm_up_while_idle(lambda: ran.append(1) or True, 6, WaitThenSee(),
                                      seen.is_set, idle_first_s=5.0)
    assert count == 0 and ran == []
    stop = threading.Event()
    stop.set()
    assert driver.warm_up_while_idle(lambda: ran.append(1) or True, 6, stop, lambda: False,
                                     idle_first_s=3600.0) == 0
    assert ran == []


def test_a_failed_pass_ends_the_passes():
    passes = Passes(fail_at=3)
    assert driver.warm_up_while_idle(passes.run, 6, threading.Event(), passes.busy) == 2
    assert passes.ran == 3, "the third pass ran, failed, and no fourth started"


def test_in_the_background_the_passes_run_in_the_warm_up_pool(monkeypatch):
    from tests.unit.spark.service.test_warm_up_when_settled import FakeSpark

    rows: list[int] = []

    def fake_warm_up_quietly(spark, sample_rows: int) -> bool:
        rows.append(sample_rows)
        return True

    monkeypatch.setattr(driver, "warm_up_quietly", fake_warm_up_quietly)
    monkeypatch.setattr(driver, "IDLE_FIRST_S", 0.0)
    spark = FakeSpark("local[2]")
    thread = driver.warm_up_idle_in_background(spark, 4, threading.Event(), lambda: False)
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert rows == [driver.IDLE_PASS_ROWS] * 4
    assert spark.sparkContext.pools == [driver.WARM_UP_POOL]
    assert driver.warm_up_idle_in_background(spark, 0, threading.Event(), lambda: False) is None
