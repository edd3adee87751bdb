"""The `kaska` stream's options, its gate, the per-topic transform argument, the stream reader
over a scripted probe and the data-loss path of range reads (no broker, no Spark session)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from pyspark.sql.types import StringType, StructField, StructType

from common.kaska.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from spark.source.kaska_gate import ADMIT_ALL, KaskaGateError, TopicAdmission, bound_gate
from spark.source.kaska_options import KaskaOptions, KaskaOptionsError, transform_argument
from spark.source.kaska_plan import KaskaDataLossError
from spark.source.kaska_read import OffsetRange, range_records
from spark.source.kaska_stream import KaskaStreamReader, records_max_of

PATTERN = r"flights\..+"
BASE = {"brokers": "h:1", "subscribePattern": PATTERN, "columns": '["legId"]'}
GATE = f"{__name__}:gate_b_capped"


def gate_b_capped(topic: str, argument: str | None) -> TopicAdmission:
    """A `topicGate`: flights.b only, capped at offset 5 of partition 0; records its calls."""
    CALLS.append((topic, argument))
    if topic != "flights.b":
        return TopicAdmission(admitted=False)
    return TopicAdmission(admitted=True, end_offsets={0: 5})


def gate_answering_nonsense(topic: str, argument: str | None):
    return {"admitted": True}


CALLS: list[tuple[str, str | None]] = []


# --- options ----------------------------------------------------------------------------------


def test_a_pattern_subscription_parses_with_its_streaming_options():
    options = KaskaOptions.parse({**BASE, "maxOffsetsPerTrigger": "50",
                                  "failOnDataLoss": "false", "topicGate": GATE,
                                  "topicGateArgument": "x"}, streaming=True)
    assert (options.topic, options.subscribe_pattern) == (None, PATTERN)
    assert (options.max_offsets_per_trigger, options.fail_on_data_loss) == (50, False)
    assert (options.topic_gate, options.topic_gate_argument) == (GATE, "x")
    defaults = KaskaOptions.parse(BASE, streaming=True)
    assert (defaults.max_offsets_per_trigger, defaults.fail_on_data_loss) == (None, True)


def test_the_pattern_must_match_the_whole_topic_name():
    options = KaskaOptions.parse(BASE, streaming=True)
    assert options.follows("flights.c1")
    assert not options.follows("xflights.c1") and not options.follows("flights.")
    assert not options.follows("other")
    single = KaskaOptions.parse({"brokers": "h:1", "topic": "flights.c1"}, streaming=True)
    assert single.follows("flights.c1") and not single.follows("flights.c10")


@pytest.mark.parametrize("options, streaming, message", [
    ({"brokers": "h:1", "columns": "[]"}, True, "exactly one"),
    ({**BASE, "topic": "flights.a"}, True, "exactly one"),
    ({**BASE, "subscribePattern": ""}, True, "exactly one"),
    (BASE, False, "streaming"),
    ({**BASE, "subscribePattern": "flights.(("}, True, "subscribePattern"),
    ({"brokers": "h:1", "subscribePattern": PATTERN}, True, "columns"),
    ({**BASE, "topicGateArgument": "x"}, True, "topicGate"),
    ({**BASE, "topicGate": "spark.no_such_module:gate"}, True, "topicGate"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxoffsetspertrigger"),
    ({**BASE, "failOnDataLoss": "maybe"}, True, "failondataloss"),
    ({**BASE, "startingOffsets": '{"other": {"0": 1}}'}, True, "does not match"),
])
def test_bad_stream_options_are_named_errors(options, streaming, message):
    with pytest.raises(KaskaOptionsError, match=message):
        KaskaOptions.parse(options, streaming=streaming)


def test_starting_offsets_may_name_several_matched_topics():
    options = KaskaOptions.parse(
        {**BASE, "startingOffsets": '{"flights.a": {"0": 3}, "flights.b": {"1": -2}}'},
        streaming=True)
    assert options.starting == {"flights.a": {0: 3}, "flights.b": {1: -2}}


def test_the_topic_placeholder_is_replaced_as_plain_text():
    argument = '{"topic": "{topic}", "again": "{topic}", "other": "{cid}"}'
    assert transform_argument(argument, "flights.c1") == \
        '{"topic": "flights.c1", "again": "flights.c1", "other": "{cid}"}'
    assert transform_argument(None, "flights.c1") is None


# --- the gate ---------------------------------------------------------------------------------


def test_without_a_gate_every_topic_is_admitted_uncapped():
    gate = bound_gate(KaskaOptions.parse(BASE, streaming=True))
    assert gate("flights.anything") == ADMIT_ALL
    assert ADMIT_ALL.end_offsets is None


def test_the_gate_gets_the_topic_and_its_argument():
    CALLS.clear()
    gate = bound_gate(KaskaOptions.parse({**BASE, "topicGate": GATE,
                                          "topicGateArgument": "arg"}, streaming=True))
    assert gate("flights.b") == TopicAdmission(True, {0: 5})
    assert CALLS == [("flights.b", "arg")]


def test_a_gate_answering_something_else_is_a_named_error():
    gate = bound_gate(KaskaOptions.parse(
        {**BASE, "topicGate": f"{__name__}:gate_answering_nonsense"}, streaming=True))
    with pytest.raises(KaskaGateError, match="not a TopicAdmission"):
        gate("flights.a")
    with pytest.raises(KaskaGateError):
        TopicAdmission(True, {0: -1})


# --- the read limit ---------------------------------------------------------------------------


def test_read_limits_become_a_record_bound():
    assert records_max_of(ReadAllAvailable()) is None
    assert records_max_of(None) is None
    assert records_max_of(ReadMaxRows(7)) == 7
    with pytest.raises(KaskaOptionsError, match="ReadMaxRows"):
        records_max_of(ReadMinRows(3))


# --- the reader over a scripted probe ---------------------------------------------------------


class ScriptedProbe:
    """A TopicProbe stand-in: the topics and bounds the test says the brokers hold."""

    def __init__(self, topics: dict[str, dict[int, tuple[int, int]]]) -> None:
        self.topics = topics

    def observe(self, follows):
        return {topic: dict(bounds) for topic, bounds in self.topics.items() if follows(topic)}

    def log_starts(self, wanted):
        return {topic: {p: self.topics[topic][p][0] for p in partitions}
                for topic, partitions in wanted.items() if topic in self.topics}

    def close(self) -> None:
        pass


SCHEMA = StructType([StructField("legId", StringType())])


def stream_reader(probe: ScriptedProbe, **options: str) -> KaskaStreamReader:
    reader = KaskaStreamReader(KaskaOptions.parse({**BASE, **options}, streaming=True), SCHEMA)
    reader._probe = probe  # the broker connection, scripted
    return reader


def test_the_reader_discovers_gates_limits_and_reports():
    probe = ScriptedProbe({"flights.a": {0: (0, 9)}, "flights.b": {0: (0, 9), 1: (2, 4)},
                           "other": {0: (0, 9)}})
    reader = stream_reader(probe, topicGate=GATE, maxOffsetsPerTrigger="3",
                           startingOffsets="earliest")
    assert reader.getDefaultReadLimit() == ReadMaxRows(3)
    start = reader.initialOffset()
    assert start == {"flights.b": {"0": 0, "1": 2}}  # a is not admitted, other not matched
    end = reader.latestOffset(start, ReadMaxRows(3))
    assert end == {"flights.b": {"0": 2, "1": 3}}
    assert reader.reportLatestOffset() == {"flights.b": {"0": 5, "1": 4}}  # the cap on 0
    assert reader.latestOffset(end, ReadAllAvailable()) == {"flights.b": {"0": 5, "1": 4}}
    ranges = reader.partitions(start, end)
    assert ranges == [OffsetRange("flights.b", 0, 0, 2), OffsetRange("flights.b", 1, 2, 3)]


def test_a_topic_appearing_mid_stream_is_planned_from_its_log_start():
    probe = ScriptedProbe({"flights.a": {0: (0, 4)}})
    reader = stream_reader(probe, startingOffsets="latest")
    start = reader.initialOffset()
    assert start == {"flights.a": {"0": 4}}
    probe.topics["flights.c"] = {0: (1, 6)}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"flights.a": {"0": 4}, "flights.c": {"0": 6}}
    assert reader.partitions(start, end) == [OffsetRange("flights.c", 0, 1, 6)]


def test_the_reader_fails_on_a_topic_deleted_with_records_unread():
    probe = ScriptedProbe({"flights.a": {0: (0, 8)}})
    reader = stream_reader(probe, maxOffsetsPerTrigger="2", startingOffsets="earliest")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(2))
    assert end == {"flights.a": {"0": 2}}
    del probe.topics["flights.a"]
    with pytest.raises(KaskaDataLossError, match="deleted"):
        reader.latestOffset(end, ReadMaxRows(2))
    lenient = stream_reader(probe, failOnDataLoss="false")
    lenient._readable = reader._readable
    assert lenient.latestOffset(end, ReadMaxRows(2)) == {}


def test_a_one_topic_stream_reads_its_old_checkpoint_form():
    probe = ScriptedProbe({"flights.a": {0: (0, 8), 1: (0, 3)}})
    reader = KaskaStreamReader(KaskaOptions.parse(
        {"brokers": "h:1", "topic": "flights.a", "columns": '["legId"]'}, streaming=True), SCHEMA)
    reader._probe = probe
    assert reader.latestOffset({"0": 5, "1": 3}, ReadAllAvailable()) == \
        {"flights.a": {"0": 8, "1": 3}}


# --- data loss while a task reads -------------------------------------------------------------


class LosingReader:
    """A RangeReader stand-in whose log start moves to `log_start` once `raise_at` is reached."""

    def __init__(self, log_start: int, raise_at: int, error=OffsetOutOfRangeError) -> None:
        self.log_start, self.raise_at, self.error = log_start, raise_at, error
        self.deleted = False

    def read(self, topic, partition, start, end):
        for offset in range(start, end):
            if offset == self.raise_at and not self.deleted:
                self.deleted = True
                raise self.error(f"{topic}/{partition}@{offset} gone")
            if self.deleted and offset < self.log_start:
                raise self.error("still gone")
            yield Record(offset)

    def offsets(self, topic, partition):
        return self.log_start, 100


class Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


def test_records_deleted_under_a_task_fail_it_by_name_or_are_skipped():
    offset_range = OffsetRange("flights.a", 0, 0, 10)
    with pytest.raises(KaskaDataLossError, match="flights.a/0"):
        list(range_records(LosingReader(6, 3), offset_range))
    read = [r.offset for r in range_records(LosingReader(6, 3), offset_range, False)]
    assert read == [0, 1, 2, 6, 7, 8, 9]
    gone = LosingReader(0, 4, UnknownTopicOrPartitionError)
    assert [r.offset for r in range_records(gone, offset_range, False)] == [0, 1, 2, 3]
