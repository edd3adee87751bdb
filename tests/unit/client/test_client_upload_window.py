"""UploadWindow (client/upload_window.py) stepped on a fake clock and a fake log start: held
back over the share, released as the log start moves, stopped while held, polling bounded by
the interval and only near the window, the stats, and a resumed client's rebuilt window."""

import threading

import pytest

from client.upload_window import UploadInterruptedError, UploadWindow, UploadWindowConfigError

MIB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class LogStarts:
    """The broker's log start per partition, moved by the test; counts the polls."""

    def __init__(self, partitions: int) -> None:
        self.starts = [0] * partitions
        self.polls = [0] * partitions

    def __call__(self, partition: int) -> int:
        self.polls[partition] += 1
        return self.starts[partition]


class SteppingStop(threading.Event):
    """A stop event whose wait advances the fake clock instead of sleeping, and runs `on_wait`
    (the test's view of the world moving on) after each wait."""

    def __init__(self, clock: Clock, on_wait=None) -> None:
        super().__init__()
        self.clock = clock
        self.on_wait = on_wait or (lambda: None)
        self.waits_s = []

    def wait(self, timeout=None):
        self.waits_s.append(timeout)
        self.clock.now += timeout
        self.on_wait()
        return self.is_set()


def window_of(window_bytes=4 * MIB, partitions=2, poll_interval_s=0.2, **options):
    clock, starts = Clock(), LogStarts(partitions)
    window = UploadWindow(window_bytes, partitions, starts, clock, poll_interval_s, **options)
    return window, clock, starts


def fill(window, partition, first_offset, count, payload_bytes):
    for offset in range(first_offset, first_offset + count):
        window.acked(partition, offset, payload_bytes)


def test_admits_until_the_share_is_exceeded_then_holds_back():
    window, _, starts = window_of()  # share: 2 MiB per partition
    fill(window, 0, 0, 2, MIB)
    assert window.backlog_bytes(0) == 2 * MIB and window.admit(0) == 0.0  # at the share: ok
    window.acked(0, 2, 1)
    assert window.admit(0) > 0  # one byte over: held back
    assert window.admit(1) == 0.0  # the other partition has its own share
    assert starts.polls == [1, 0]  # asked once for the held partition, never for the idle one
    assert window.stats().partitions_held == 1


def test_released_as_the_log_start_passes_the_acknowledged_records():
    window, clock, starts = window_of()
    fill(window, 0, 0, 3, MIB)
    assert window.admit(0) > 0
    starts.starts[0] = 1  # the service folded offset 0: 2 MiB left, at the share
    assert window.admit(0) > 0, "not asked again before the poll interval"
    clock.now += 0.2
    assert window.admit(0) == 0.0 and window.backlog_bytes(0) == 2 * MIB
    assert window.stats().held_back_s == pytest.approx(0.2)


def test_wait_for_room_polls_at_the_interval_until_released():
    window, clock, starts = window_of(poll_interval_s=0.25)
    fill(window, 1, 0, 5, MIB)
    started_at = clock.now

    def fold_after_a_second():
        if clock.now - started_at >= 1.0:
            starts.starts[1] = 4

    stop = SteppingStop(clock, fold_after_a_second)
    window.wait_for_room(1, stop)
    assert window.backlog_bytes(1) == MIB
    assert clock.now - started_at == pytest.approx(1.0)
    assert all(wait_s == pytest.approx(0.25) for wait_s in stop.waits_s)
    assert starts.polls[1] == 5  # at start, then every 0.25 s: never more often
    stats = window.stats()
    assert stats.held_back_s == pytest.approx(1.0) and stats.partitions_held == 0
    assert stats.backlog_bytes_peak == 5 * MIB and stats.log_start_polls == 5


def test_a_stop_while_held_back_ends_the_wait_as_an_interruption():
    window, clock, _ = window_of()
    fill(window, 0, 0, 3, MIB)
    stop = SteppingStop(clock)
    stop.on_wait = lambda: stop.set() if len(stop.waits_s) == 3 else None
    with pytest.raises(UploadInterruptedError, match="held back"):
        window.wait_for_room(0, stop)
    assert len(stop.waits_s) == 3
    stats = window.stats()
    assert stats.partitions_held == 0 and stats.held_back_s == pytest.approx(0.6)


def test_a_set_stop_interrupts_even_with_room():
    window, clock, _ = window_of()
    stop = SteppingStop(clock)
    stop.set()
    with pytest.raises(UploadInterruptedError):
        window.wait_for_room(0, stop)


def test_far_below_the_window_the_log_start_is_never_asked():
    window, clock, starts = window_of(window_bytes=100 * MIB, partitions=1)
    for offset in range(70):
        window.acked(0, offset, MIB)
        assert window.admit(0) == 0.0
        clock.now += 1.0
    assert starts.polls == [0]
    window.acked(0, 70, 6 * MIB)  # 76 MiB: past three quarters, asked at most every interval
    for _ in range(10):
        assert window.admit(0) == 0.0
        clock.now += 0.05
    assert starts.polls == [3]


def test_held_back_time_counts_wall_time_not_partitions():
    window, clock, _ = window_of(partitions=2)
    for partition in (0, 1):
        fill(window, partition, 0, 3, MIB)
        window.admit(partition)
    clock.now += 1.0
    assert window.stats().held_back_s == pytest.approx(1.0)  # both held, one second


def test_a_record_bigger_than_the_share_goes_once_the_backlog_is_folded():
    window, clock, starts = window_of(window_bytes=2 * MIB, partitions=2)
    assert window.admit(0) == 0.0
    window.acked(0, 0, 5 * MIB)  # one slice larger than the whole share
    assert window.admit(0) > 0
    starts.starts[0] = 1
    clock.now += 0.2
    assert window.admit(0) == 0.0 and window.backlog_bytes(0) == 0


def test_the_record_count_is_bounded_too():
    window, clock, starts = window_of(records_held_max=10)
    fill(window, 0, 0, 10, 1)
    assert window.admit(0) > 0
    starts.starts[0] = 5
    clock.now += 0.2
    assert window.admit(0) == 0.0


def test_repeated_and_folded_offsets_are_not_counted_twice():
    window, clock, starts = window_of()
    fill(window, 0, 0, 3, MIB)
    fill(window, 0, 1, 2, MIB)  # re-sent records answered as duplicates: counted already
    assert window.backlog_bytes(0) == 3 * MIB
    starts.starts[0] = 3
    window.admit(0)
    window.acked(0, 2, MIB)  # below the log start: folded already
    assert window.backlog_bytes(0) == 0


def test_a_resumed_client_sizes_only_what_the_log_start_has_not_passed():
    """Messages acknowledged before a restart: those below the log start are folded (not
    counted, never encoded); those above count; then re-sent ones join: exact, not stuck."""
    window, clock, starts = window_of()
    starts.starts[0] = 4
    assert [window.wants_size(0, offset) for offset in range(6)] == [False] * 4 + [True] * 2
    assert starts.polls[0] == 1  # asked once, not per message
    fill(window, 0, 4, 2, MIB)  # what wants_size asked to size
    window.acked(0, 6, MIB)  # re-sent, answered as a duplicate with its offset
    assert window.backlog_bytes(0) == 3 * MIB and window.admit(0) > 0
    starts.starts[0] = 6
    clock.now += 0.2
    assert window.admit(0) == 0.0 and window.backlog_bytes(0) == MIB


@pytest.mark.parametrize("options", [{"window_bytes": 0}, {"poll_interval_s": -1},
                                     {"records_held_max": 0}])
def test_bad_settings_are_refused(options):
    settings = {"window_bytes": MIB, "poll_interval_s": 0.2, "records_held_max": 5, **options}
    with pytest.raises(UploadWindowConfigError):
        UploadWindow(settings["window_bytes"], 2, LogStarts(2), Clock(),
                     settings["poll_interval_s"], settings["records_held_max"])
