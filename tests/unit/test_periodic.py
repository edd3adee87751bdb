"""common/periodic.py: ticks every interval until stopped, the first one an interval after start
(or at once), expected errors handed on and the loop going on, others ending the thread."""

from __future__ import annotations

import logging
import threading

import pytest

from common.periodic import PeriodicThread

WAIT_S = 10.0  # bounds a wait for a tick that comes within milliseconds


class Ticks:
    """A tick that counts its calls and sets `reached` on call number `until`; `raising`: what
    the first calls raise (one exception each)."""

    def __init__(self, until: int = 1, raising: list[Exception] | None = None) -> None:
        self.calls = 0
        self.until = until
        self.raising = list(raising or [])
        self.reached = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        if self.calls >= self.until:
            self.reached.set()
        if self.raising:
            raise self.raising.pop(0)


def test_ticks_every_interval_until_stopped():
    ticks = Ticks(until=3)
    periodic = PeriodicThread("test-periodic", 0.001, ticks)
    periodic.start()
    assert ticks.reached.wait(WAIT_S)
    periodic.stop()
    assert not periodic.is_alive() and periodic.stopping
    calls = ticks.calls
    assert calls >= 3
    periodic.stop()  # again: nothing more happens
    assert ticks.calls == calls


def test_the_first_tick_waits_one_interval():
    ticks = Ticks()
    periodic = PeriodicThread("test-periodic", 3600.0, ticks)
    periodic.start()
    periodic.stop()
    assert ticks.calls == 0 and not periodic.is_alive()


def test_tick_at_start_ticks_at_once():
    ticks = Ticks()
    periodic = PeriodicThread("test-periodic", 3600.0, ticks, tick_at_start=True)
    periodic.start()
    assert ticks.reached.wait(WAIT_S)
    periodic.stop()
    assert ticks.calls == 1 and not periodic.is_alive()


def test_the_thread_carries_its_name_and_is_a_daemon():
    names: list[str] = []
    seen = threading.Event()

    def tick() -> None:
        names.append(threading.current_thread().name)
        assert threading.current_thread().daemon
        seen.set()

    periodic = PeriodicThread("kaska-test-loop", 0.001, tick)
    periodic.start()
    assert seen.wait(WAIT_S)
    periodic.stop()
    assert names[0] == "kaska-test-loop"


def test_an_expected_error_is_handed_on_and_the_loop_goes_on():
    errors: list[Exception] = []
    ticks = Ticks(until=3, raising=[OSError("disk"), OSError("again")])
    periodic = PeriodicThread("test-periodic", 0.001, ticks, errors=(OSError,),
                              on_error=errors.append)
    periodic.start()
    assert ticks.reached.wait(WAIT_S)
    periodic.stop()
    assert [str(error) for error in errors] == ["disk", "again"]


def test_an_expected_error_is_logged_by_default(caplog):
    ticks = Ticks(until=2, raising=[OSError("disk full")])
    periodic = PeriodicThread("test-periodic", 0.001, ticks, errors=(OSError,))
    with caplog.at_level(logging.WARNING, logger="common.periodic"):
        periodic.start()
        assert ticks.reached.wait(WAIT_S)
        periodic.stop()
    assert any("test-periodic: tick failed: disk full" in record.getMessage()
               for record in caplog.records)


def test_an_unexpected_error_ends_the_thread(monkeypatch):
    died: list[tuple[str, type]] = []
    monkeypatch.setattr(threading, "excepthook",
                        lambda args: died.append((args.thread.name, args.exc_type)))
    ticks = Ticks(raising=[ValueError("a bug")])
    periodic = PeriodicThread("test-periodic", 0.001, ticks, errors=(OSError,))
    periodic.start()
    periodic.join(WAIT_S)
    assert not periodic.is_alive()
    assert died == [("test-periodic", ValueError)] and ticks.calls == 1


def test_a_shared_stop_event_ends_the_loop():
    stop = threading.Event()
    ticks = Ticks()
    periodic = PeriodicThread("test-periodic", 0.001, ticks, stop=stop)
    periodic.start()
    assert ticks.reached.wait(WAIT_S)
    stop.set()
    periodic.join(WAIT_S)
    assert not periodic.is_alive() and periodic.stopping


def test_stop_from_the_tick_itself_ends_the_loop():
    holder: list[PeriodicThread] = []
    ticks = Ticks()

    def tick() -> None:
        ticks()
        holder[0].stop()  # must not try to join its own thread

    periodic = PeriodicThread("test-periodic", 0.001, tick)
    holder.append(periodic)
    periodic.start()
    periodic.join(WAIT_S)
    assert not periodic.is_alive() and ticks.calls == 1


def test_stop_before_start_is_harmless():
    periodic = PeriodicThread("test-periodic", 0.001, Ticks())
    periodic.stop()
    assert periodic.stopping and not periodic.is_alive()


@pytest.mark.parametrize("tick_at_start", [False, True])
def test_a_tick_under_way_finishes_before_stop_returns(tick_at_start):
    entered, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def tick() -> None:
        entered.set()
        release.wait(WAIT_S)
        finished.append(True)

    stop = threading.Event()
    periodic = PeriodicThread("test-periodic", 0.001, tick, stop=stop,
                              tick_at_start=tick_at_start)
    periodic.start()
    assert entered.wait(WAIT_S)
    stop.set()  # before the tick ends: no second tick
    stopper = threading.Thread(target=periodic.stop)
    stopper.start()
    release.set()
    stopper.join(WAIT_S)
    assert finished == [True] and not periodic.is_alive()
