"""`kaska` source options and range planning (no broker, no Spark session)."""

from __future__ import annotations

import json

import pytest

from spark.source.kaska_source import (
    EARLIEST,
    LATEST,
    KaskaOptions,
    KaskaOptionsError,
    OffsetRange,
    offsets_json,
    parse_offsets,
    plan_ranges,
    resolve_offsets,
)

TOPIC = "flights.c1"


class OffsetsOnly:
    """A RangeReader stand-in answering partition counts and (start, end) offsets."""

    def __init__(self, bounds: list[tuple[int, int]]) -> None:
        self.bounds = bounds

    def partition_count(self, topic: str) -> int:
        return len(self.bounds)

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        return self.bounds[partition]


def test_offsets_json_round_trips_through_the_option_parser():
    text = offsets_json(TOPIC, [5, 0, 7])
    assert json.loads(text) == {TOPIC: {"0": 5, "1": 0, "2": 7}}
    assert parse_offsets(text, TOPIC) == {0: 5, 1: 0, 2: 7}
    assert parse_offsets(" Latest ", TOPIC) == LATEST
    assert parse_offsets("earliest", TOPIC) == EARLIEST


@pytest.mark.parametrize("text", [
    "{", "[1, 2]", '{"other": {"0": 1}}', '{"flights.c1": [1]}', '{"flights.c1": {"x": 1}}',
    '{"flights.c1": {"0": -3}}', '{"flights.c1": {"0": 1.5}}', '{"flights.c1": {"0": true}}',
])
def test_malformed_offsets_are_named_errors(text):
    with pytest.raises(KaskaOptionsError):
        parse_offsets(text, TOPIC)


def test_options_are_case_insensitive_with_batch_and_streaming_defaults():
    options = KaskaOptions.parse({"Brokers": "h:1", "TOPIC": TOPIC, "columns": '["a", "b"]',
                                  "offsetsPerSliceMax": "10"})
    assert (options.brokers, options.topic, options.columns) == ("h:1", TOPIC, ("a", "b"))
    assert (options.starting, options.ending, options.offsets_per_slice_max) == (
        EARLIEST, LATEST, 10)
    assert KaskaOptions.parse({"brokers": "h:1", "topic": TOPIC}, streaming=True).starting == \
        LATEST


@pytest.mark.parametrize("options", [
    {"topic": TOPIC},
    {"brokers": "h:1"},
    {"brokers": "h:1", "topic": TOPIC, "columns": "a,b"},
    {"brokers": "h:1", "topic": TOPIC, "columns": '["a", "a"]'},
    {"brokers": "h:1", "topic": TOPIC, "columns": '["row_id"]'},
    {"brokers": "h:1", "topic": TOPIC, "fetchBytesMax": "0"},
    {"brokers": "h:1", "topic": TOPIC, "retryDeadlineS": "soon"},
    {"brokers": "h:1", "topic": TOPIC, "arrowTransformArgument": "{}"},  # no transform
])
def test_bad_options_are_named_errors(options):
    with pytest.raises(KaskaOptionsError):
        KaskaOptions.parse(options)


def test_resolve_fills_left_out_partitions_and_sentinels():
    reader = OffsetsOnly([(2, 10), (0, 4), (1, 1)])
    assert resolve_offsets(EARLIEST, reader, TOPIC, EARLIEST) == {0: 2, 1: 0, 2: 1}
    assert resolve_offsets(LATEST, reader, TOPIC, LATEST) == {0: 10, 1: 4, 2: 1}
    assert resolve_offsets({0: 5, 1: -1}, reader, TOPIC, EARLIEST) == {0: 5, 1: 4, 2: 1}
    assert resolve_offsets({2: -2}, reader, TOPIC, LATEST) == {0: 10, 1: 4, 2: 1}
    with pytest.raises(KaskaOptionsError):
        resolve_offsets({3: 0}, reader, TOPIC, LATEST)


def test_one_range_per_non_empty_partition():
    ranges = plan_ranges(TOPIC, {0: 0, 1: 4, 2: 3}, {0: 5, 1: 4, 2: 9})
    assert ranges == [OffsetRange(TOPIC, 0, 0, 5), OffsetRange(TOPIC, 2, 3, 9)]


def test_slices_cover_each_range_exactly():
    ranges = plan_ranges(TOPIC, {0: 3}, {0: 10, 1: 4}, offsets_per_slice_max=3)
    assert ranges == [OffsetRange(TOPIC, 0, 3, 6), OffsetRange(TOPIC, 0, 6, 9),
                      OffsetRange(TOPIC, 0, 9, 10), OffsetRange(TOPIC, 1, 0, 3),
                      OffsetRange(TOPIC, 1, 3, 4)]


def test_an_end_before_its_start_is_refused():
    with pytest.raises(KaskaOptionsError):
        plan_ranges(TOPIC, {0: 5}, {0: 4})


@pytest.mark.parametrize("text, expected", [("true", True), ("FALSE", False), (" false ", False)])
def test_include_ids_parses_true_or_false(text, expected):
    options = KaskaOptions.parse({"brokers": "b:1", "topic": TOPIC, "includeIds": text})
    assert options.include_ids is expected
    assert KaskaOptions.parse({"brokers": "b:1", "topic": TOPIC}).include_ids is True


def test_include_ids_refuses_anything_else():
    with pytest.raises(KaskaOptionsError, match="includeids"):
        KaskaOptions.parse({"brokers": "b:1", "topic": TOPIC, "includeIds": "yes"})
