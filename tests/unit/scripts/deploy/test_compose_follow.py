"""compose_follow's pure parts: Docker times, result-line detection, the closing summary."""

import datetime as dt
import threading

from scripts.deploy.follow import ClientFollower, Timings, docker_time, summary_lines


def test_docker_time_keeps_microseconds_of_a_nanosecond_stamp():
    parsed = docker_time("2026-11-22T02:47:49.123456789Z")
    assert parsed == dt.datetime(2026, 11, 22, 2, 47, 49, 123456, tzinfo=dt.UTC)
    assert docker_time("2026-11-22T02:47:49Z").microsecond == 0


def test_chunks_are_printed_as_lines_and_the_first_result_row_is_timed(capsys):
    timings = Timings(started_at=0.0)
    follower = ClientFollower("client-2", container=None, timings=timings, prefix="client-2 | ",
                              print_lock=threading.Lock(), restart_wait_s=1.0)
    follower._print_stream([b"upload flights: do", b"ne\nq1 | legId,route", b",totalFare\nq1 done"])
    assert capsys.readouterr().out.splitlines() == [
        "client-2 | upload flights: done", "client-2 | q1 | legId,route,totalFare",
        "client-2 | q1 done"]
    assert timings.first_result_at is not None


def test_summary_gives_both_times_only_when_every_client_finished():
    timings = Timings(started_at=100.0, first_result_at=160.5,
                      finished_at={"client-1": 161.0}, exit_codes={"client-1": 0},
                      restarts_seen={"client-1": 2})
    assert summary_lines(timings, clients=1) == [
        "time to first result: 60.5 s", "total time: 61.0 s", "client-1: exit 0 after 2 restart(s)"]
    assert "total time" not in " ".join(summary_lines(timings, clients=2))
