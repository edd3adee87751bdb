"""common/backoff.py: the pauses double from the first, stop at the cap, and equal the
hand-written doubling loops they replaced."""

import itertools

import pytest

from common.backoff import DOUBLINGS_MAX, Backoff


def test_pauses_double_up_to_the_cap():
    assert [Backoff(0.2, 2.0).delay_s(n) for n in range(6)] == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_delays_equal_the_doubling_loop():
    pause_s, loop = 0.2, []
    for _ in range(12):
        loop.append(pause_s)
        pause_s = min(5.0, pause_s * 2)
    assert list(itertools.islice(Backoff(0.2, 5.0).delays_s(), 12)) == loop


def test_long_runs_of_failures_stay_finite():
    backoff = Backoff(1.0, 1e300)
    assert backoff.delay_s(10**6) == backoff.delay_s(DOUBLINGS_MAX) == 2.0 ** DOUBLINGS_MAX
    assert backoff.delay_s(-1) == 1.0


@pytest.mark.parametrize("initial_s, max_s", [(-1.0, 1.0), (1.0, float("inf")),
                                              (float("nan"), 1.0)])
def test_bad_bounds_are_refused(initial_s, max_s):
    with pytest.raises(ValueError, match="back-off"):
        Backoff(initial_s, max_s)
