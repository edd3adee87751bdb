"""Reading the health checkers' log lines back: the agreed leader, sightings, restarts, and
the local logs' time of day."""

import datetime as dt

from scripts.faults.checker_logs import (
    LogLine,
    agreed_leader,
    local_lines,
    local_time,
    named_leader,
    restarted,
    sightings,
)


def test_the_last_role_line_names_the_leader():
    assert named_leader(["ROLE node=1 role=leader", "ROLE node=1 role=follower leader=3"]) == (
        "healthchecker-3")
    assert named_leader(["x", "ROLE node=2 role=leader"]) == "healthchecker-2"
    assert named_leader(["ROLE node=2 role=electing previous=3"]) == ""
    assert named_leader(["nothing"]) is None


def test_a_leader_is_agreed_only_when_every_checker_names_it():
    follower = ["ROLE node=1 role=follower leader=3"]
    leader = ["ROLE node=3 role=leader"]
    assert agreed_leader({"healthchecker-1": follower, "healthchecker-3": leader}) == (
        "healthchecker-3")
    # A paused leader still claims the role while the others elect: no agreement.
    electing = ["ROLE node=1 role=electing previous=3"]
    assert agreed_leader({"healthchecker-1": electing, "healthchecker-3": leader}) is None
    assert agreed_leader({"healthchecker-1": follower, "healthchecker-2": []}) is None
    assert agreed_leader({"healthchecker-1": electing}) is None


def test_sightings_and_restarts_are_read_from_the_lines():
    lines = [
        LogLine(1.0, "healthchecker.monitor INFO SEEN service=broker-1 instance=b1:1:aa"),
        LogLine(2.0, "healthchecker.monitor INFO SEEN service=spark-master probe answered"),
        LogLine(3.0, "healthchecker.node INFO PHASE service=spark-worker-1 phase=up "
                     "previous=starting reason=probe answered"),
        LogLine(4.0, "healthchecker.node INFO PHASE service=broker-2 phase=dead previous=up"),
        LogLine(5.0, "healthchecker.node INFO RESTARTED service=broker-2 action=started x"),
        LogLine(6.0, "healthchecker.node WARNING RESTART service=broker-3 attempt=1"),
    ]
    found = sightings("healthchecker-2", lines)
    assert [(s.at, s.service, s.instance, s.by) for s in found] == [
        (1.0, "broker-1", "b1:1:aa", "healthchecker-2"),
        (2.0, "spark-master", "", "healthchecker-2"),
        (3.0, "spark-worker-1", "", "healthchecker-2")]
    assert restarted(lines) == [(5.0, "broker-2")]


def test_local_times_of_day_become_epoch_seconds_across_midnight():
    evening = dt.datetime(2024, 5, 1, 23, 59, 58).timestamp()
    assert local_time(23, 59, 59, 500, evening) == evening + 1.5
    assert local_time(0, 0, 1, 0, evening) == evening + 3.0  # the next day
    after_midnight = dt.datetime(2024, 5, 2, 0, 0, 2).timestamp()
    assert local_time(23, 59, 59, 0, after_midnight) == after_midnight - 3.0  # the day before


def test_local_lines_keep_stamped_lines_only():
    reference = dt.datetime(2024, 5, 1, 12, 0, 0).timestamp()
    text = ("12:00:01.250 healthchecker.node INFO ROLE node=1 role=leader\n"
            "--- 12:00:02 restarted by health checker: silent\n"
            "Traceback (most recent call last):\n"
            "12:00:03.000 healthchecker.monitor INFO SEEN service=a instance=i\n")
    assert local_lines(text, reference) == [
        LogLine(reference + 1.25, "healthchecker.node INFO ROLE node=1 role=leader"),
        LogLine(reference + 3.0, "healthchecker.monitor INFO SEEN service=a instance=i")]
