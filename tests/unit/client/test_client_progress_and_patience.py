"""Plain progress lines, the result printer, and retrying through broker restarts."""

import threading

import pytest

from client.console import ResultPrinter
from client.progress import LogUploadProgress
from client.upload_window import WindowStats
from common.flights.session_records import QueryDone
from common.kaska.errors import BrokerUnavailableError
from common.kaska.patience import BrokerStalledError, StoppedWhileWaitingError, persist

MIB = 1024 * 1024


def test_log_progress_lines_say_rows_bytes_rate_and_eta():
    now = [0.0]
    lines = []
    progress = LogUploadProgress(log_interval_s=2.0, clock=lambda: now[0], emit=lines.append)
    progress.start_file("flights", total_bytes=100 * MIB)
    now[0] = 1.0
    progress.advance(1000, 10 * MIB)  # within the interval: no line
    now[0] = 4.0
    progress.advance(3000, 25 * MIB)
    progress.finish_file(4000)
    assert lines == [
        "upload flights: 4,000 rows, 25.0 of 100.0 MiB (25%), 1,000 rows/s, ETA 12 s",
        "upload flights: done, 4,000 rows in 4.0 s (1,000 rows/s)",
    ]


def test_log_progress_says_when_the_upload_is_held_back():
    now = [0.0]
    lines = []
    progress = LogUploadProgress(log_interval_s=2.0, clock=lambda: now[0], emit=lines.append)
    progress.start_file("flights", total_bytes=100 * MIB)
    held = WindowStats(window_bytes=256 * MIB, held_back_s=3.0, backlog_bytes=260 * MIB,
                       backlog_bytes_peak=260 * MIB, partitions_held=2, log_start_polls=9)
    for step in range(5):  # asked twice at each second from 2 s to 6 s: lines at 2, 4, 6 s
        now[0] = 2.0 + step
        progress.window(held)
        progress.window(held)
    progress.window(WindowStats(256 * MIB, 3.0, 10 * MIB, 260 * MIB, 0, 9))  # not held
    assert lines == ["upload flights: held back: backlog 260.0 MiB of 256.0 MiB window, "
                     "waiting for the query service to fold"] * 3


def test_printer_shows_the_first_rows_then_only_counts():
    lines = []
    printer = ResultPrinter(rows_shown_max=2, emit=lines.append)
    printer.on_rows("q4", [["A-B", "1.5", "2.0"], ["C-D", "3.0", "4.0"]])
    printer.on_rows("q4", [["E,F", "5.0", "6.0"], ["G-H", "7.0", "8.0"]])
    printer.on_done(QueryDone("q4", 4, {"bad_fare": 2}))
    assert lines == [
        "q4 | route,avgFare,maxFare",
        "q4 | A-B,1.5,2.0",
        "q4 | C-D,3.0,4.0",
        "q4 | ... (more rows arriving; all of them go to q4.csv)",
        "q4 done: 4 rows (2 input rows invalid for the queries)",
    ]


class FlakyCall:
    def __init__(self, failures):
        self.failures = failures
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise BrokerUnavailableError("down")
        return "answer"


class InstantStop(threading.Event):
    """An event whose wait returns at once (without being set): no real sleeping in tests."""

    def wait(self, timeout=None):
        return self.is_set()


def test_persist_retries_until_the_broker_answers():
    call = FlakyCall(failures=3)
    assert persist(call, "x", InstantStop()) == "answer" and call.calls == 4


def test_persist_gives_up_after_the_stall_timeout():
    now = [0.0]

    def clock():
        now[0] += 10.0
        return now[0]

    with pytest.raises(BrokerStalledError, match="unavailable for 25 s"):
        persist(FlakyCall(failures=100), "x", InstantStop(), stall_timeout_s=25, clock=clock)


def test_persist_stops_when_asked():
    stop = InstantStop()
    stop.set()
    with pytest.raises(StoppedWhileWaitingError):
        persist(FlakyCall(failures=1), "x", stop)
