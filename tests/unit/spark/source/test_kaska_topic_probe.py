"""The stream's TopicProbe against a scripted cluster: a topic deleted is left out at once; one
whose partition is between leaders (an election) is asked again, never taken for deleted."""

from __future__ import annotations

import pytest

from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.protocol import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
)
from spark.source.kaska_options import KaskaOptions
from spark.source.kaska_stream import TopicNotLedError, TopicProbe

OPTIONS = KaskaOptions.parse({"brokers": "h:1", "subscribePattern": r"flights\..+",
                              "columns": '["legId"]', "retryDeadlineS": "5"}, streaming=True)
NO_LEADER = UnknownTopicOrPartitionError("no leader known for flights.a/0")


class ScriptedCluster:
    """Answers ListTopics from `listed`; ListOffsets with the next of `answers` (an exception
    is raised)."""

    def __init__(self, listed: dict[str, int], answers: list) -> None:
        self.listed = listed
        self.answers = answers
        self.offsets_asked = 0

    def call(self, request, route=None, no_retry=()):
        if isinstance(request, ListTopicsRequest):
            return ListTopicsResponse(dict(self.listed))
        assert isinstance(request, ListOffsetsRequest)
        self.offsets_asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0
        self.slept_s: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept_s.append(seconds)
        self.now_s += seconds


def probe_of(cluster: ScriptedCluster, clock: FakeClock) -> TopicProbe:
    return TopicProbe(OPTIONS, cluster=cluster, clock=clock, sleep=clock.sleep)


def test_a_partition_between_leaders_is_asked_again_not_left_out():
    cluster = ScriptedCluster({"flights.a": 1},
                              [NO_LEADER, NO_LEADER, ListOffsetsResponse(0, 4)])
    clock = FakeClock()
    probe = probe_of(cluster, clock)
    # Left out, the new topic's first micro-batch was planned from its end: records 0-3
    # counted as read and never read.
    assert probe.log_starts({"flights.a": [0]}) == {"flights.a": {0: 0}}
    assert cluster.offsets_asked == 3 and len(clock.slept_s) == 2


def test_a_topic_no_longer_listed_is_left_out_at_once():
    cluster = ScriptedCluster({}, [NO_LEADER])
    clock = FakeClock()
    probe = probe_of(cluster, clock)
    assert probe.log_starts({"flights.a": [0]}) == {}
    assert probe.observe(lambda topic: True) == {}
    assert clock.slept_s == []


def test_observe_waits_out_an_election_and_sees_the_topic():
    cluster = ScriptedCluster({"flights.a": 2, "other": 1},
                              [ListOffsetsResponse(0, 3), NO_LEADER, ListOffsetsResponse(1, 5)])
    clock = FakeClock()
    observed = probe_of(cluster, clock).observe(lambda topic: topic.startswith("flights."))
    assert observed == {"flights.a": {0: (0, 3), 1: (1, 5)}}


def test_a_partition_led_by_nobody_past_the_deadline_fails_the_planning_loudly():
    cluster = ScriptedCluster({"flights.a": 1}, [NO_LEADER] * 1000)
    clock = FakeClock()
    with pytest.raises(TopicNotLedError, match="no broker led it for 5 s"):
        probe_of(cluster, clock).log_starts({"flights.a": [0]})
    assert clock.now_s >= 5.0
