"""The `kaska` stream's pure planning: read-limit split, gate, topic discovery and deletion,
data loss, offsets JSON (no broker, no Spark session)."""

from __future__ import annotations

import json

import pytest

from spark.source.kaska_gate import TopicAdmission
from spark.source.kaska_options import KaskaOptionsError
from spark.source.kaska_plan import (
    KaskaDataLossError,
    KaskaOffsetsError,
    initial_offsets,
    offsets_document,
    parse_offsets_document,
    partition_begins,
    partitions_without_start,
    plan_latest,
    split_limit,
)

A, B, C = "flights.a", "flights.b", "flights.c"
IN = TopicAdmission(admitted=True)
OUT = TopicAdmission(admitted=False)


def admit_all(observed) -> dict[str, TopicAdmission]:
    return {topic: IN for topic in observed}


# --- the read limit ---------------------------------------------------------------------------


def test_under_the_limit_every_partition_reads_to_its_end():
    begins, ends = {"p0": 0, "p1": 5}, {"p0": 3, "p1": 9}
    assert split_limit(begins, ends, 7) == ends
    assert split_limit(begins, ends, None) == ends


def test_the_limit_is_shared_in_proportion_to_the_lags_and_exactly_used():
    begins = {"p0": 0, "p1": 100, "p2": 0, "p3": 7}
    ends = {"p0": 900, "p1": 190, "p2": 10, "p3": 7}  # lags 900, 90, 10, 0
    planned = split_limit(begins, ends, 100)
    reads = {key: planned[key] - begins[key] for key in begins}
    assert sum(reads.values()) == 100
    assert reads["p3"] == 0  # no lag, nothing read
    assert reads["p0"] > reads["p1"] > reads["p2"] >= 1
    assert abs(reads["p0"] - 90) <= 1 and abs(reads["p1"] - 9) <= 1
    assert all(planned[key] <= ends[key] for key in ends)


def test_every_lagging_partition_gets_a_record_when_the_limit_allows():
    begins = {f"p{i}": 0 for i in range(5)}
    ends = {"p0": 10_000, "p1": 1, "p2": 1, "p3": 2, "p4": 1}
    planned = split_limit(begins, ends, 6)
    assert all(planned[key] >= 1 for key in ends)
    assert sum(planned.values()) == 6
    assert all(planned[key] <= ends[key] for key in ends)


def test_a_limit_below_the_lagging_partitions_goes_to_the_largest_lags_in_key_order():
    begins = {"a": 0, "b": 0, "c": 0, "d": 0}
    ends = {"a": 5, "b": 9, "c": 5, "d": 0}
    assert split_limit(begins, ends, 2) == {"a": 1, "b": 1, "c": 0, "d": 0}


@pytest.mark.parametrize("limit", [1, 3, 17, 64, 99])
def test_the_split_is_deterministic_bounded_and_never_past_an_end(limit):
    begins = {("t", p): p * 3 for p in range(7)}
    ends = {("t", p): p * 3 + lag for p, lag in enumerate([0, 1, 50, 2, 13, 8, 40])}
    planned = split_limit(begins, ends, limit)
    assert planned == split_limit(dict(reversed(begins.items())), ends, limit)
    assert sum(planned[k] - begins[k] for k in ends) == min(limit, 114)
    assert all(begins[k] <= planned[k] <= ends[k] for k in ends)


# --- discovery, gate, deletion ----------------------------------------------------------------


def test_a_new_topic_starts_at_its_log_start_and_reads_to_its_high_watermark():
    observed = {A: {0: (0, 4)}, B: {0: (3, 9), 1: (0, 2)}}
    plan = plan_latest({A: {0: 1}}, observed, admit_all(observed), {}, None)
    assert plan.ends == {A: {0: 4}, B: {0: 9, 1: 2}}
    assert plan.readable == {A: {0: 4}, B: {0: 9, 1: 2}}
    assert plan.losses == ()


def test_the_limit_counts_a_new_topic_from_its_log_start():
    observed = {A: {0: (0, 100)}, B: {0: (50, 150)}}
    plan = plan_latest({A: {0: 0}}, observed, admit_all(observed), {}, 10)
    assert plan.ends == {A: {0: 5}, B: {0: 55}}


def test_a_topic_not_admitted_is_not_read_nor_in_the_offsets():
    observed = {A: {0: (0, 4)}, B: {0: (0, 9)}}
    plan = plan_latest({A: {0: 4}}, observed, {A: IN, B: OUT}, {}, None)
    assert plan.ends == {A: {0: 4}}
    assert B not in plan.readable


def test_a_followed_topic_the_gate_stops_admitting_is_held_where_it_is():
    observed = {A: {0: (0, 40)}}
    plan = plan_latest({A: {0: 7}}, observed, {A: OUT}, {}, None)
    assert plan.ends == {A: {0: 7}}


def test_the_gate_caps_each_partition_and_never_moves_one_back():
    observed = {A: {0: (0, 40), 1: (0, 40), 2: (0, 40)}}
    admission = TopicAdmission(admitted=True, end_offsets={0: 25, 1: 3})
    plan = plan_latest({A: {0: 10, 1: 5, 2: 0}}, observed, {A: admission}, {}, None)
    assert plan.ends == {A: {0: 25, 1: 5, 2: 40}}  # 1: start past the cap stays; 2: uncapped
    assert plan.readable == {A: {0: 25, 1: 3, 2: 40}}
    capped_and_limited = plan_latest({A: {0: 10, 1: 5, 2: 40}}, observed, {A: admission}, {}, 4)
    assert capped_and_limited.ends == {A: {0: 14, 1: 5, 2: 40}}


def test_a_topic_deleted_after_it_was_read_whole_is_dropped_quietly():
    observed = {B: {0: (0, 2)}}
    plan = plan_latest({A: {0: 9}, B: {0: 2}}, observed, admit_all(observed),
                       {A: {0: 9}, B: {0: 2}}, None)
    assert plan.ends == {B: {0: 2}}
    assert plan.losses == ()


def test_a_topic_gone_when_nothing_is_known_of_it_is_dropped_quietly():
    plan = plan_latest({A: {0: 3}}, {}, {}, {}, None)  # e.g. the first plan after a restart
    assert plan.ends == {} and plan.losses == ()


def test_a_topic_deleted_with_records_unread_is_data_loss():
    last_readable = {A: {0: 9}}
    with pytest.raises(KaskaDataLossError, match=r"flights.a/0 was deleted with offsets \[4, 9\)"):
        plan_latest({A: {0: 4}}, {}, {}, last_readable, None)
    plan = plan_latest({A: {0: 4}}, {}, {}, last_readable, None, fail_on_data_loss=False)
    assert plan.ends == {} and len(plan.losses) == 1


def test_records_deleted_before_they_were_read_are_data_loss_or_skipped():
    observed = {A: {0: (6, 10), 1: (0, 10)}}
    with pytest.raises(KaskaDataLossError, match=r"\[2, 6\) were deleted.*failOnDataLoss"):
        plan_latest({A: {0: 2, 1: 0}}, observed, admit_all(observed), {}, None)
    plan = plan_latest({A: {0: 2, 1: 0}}, observed, admit_all(observed), {}, 2,
                       fail_on_data_loss=False)
    assert plan.ends == {A: {0: 7, 1: 1}}  # partition 0 counted from its log start
    assert len(plan.losses) == 1


def test_a_start_past_the_log_end_is_data_loss_or_restarts_at_the_log_start():
    observed = {A: {0: (0, 3)}}  # the topic was created again
    with pytest.raises(KaskaDataLossError, match="created again"):
        plan_latest({A: {0: 8}}, observed, admit_all(observed), {}, None)
    plan = plan_latest({A: {0: 8}}, observed, admit_all(observed), {}, None,
                       fail_on_data_loss=False)
    assert plan.ends == {A: {0: 3}}


def test_nothing_new_plans_the_start_itself_as_the_same_text():
    observed = {A: {0: (0, 4)}, B: {1: (0, 2), 0: (0, 7)}}
    start = {B: {0: 7, 1: 2}, A: {0: 4}}
    plan = plan_latest(start, observed, admit_all(observed), {}, 5)
    assert json.dumps(offsets_document(plan.ends)) == json.dumps(offsets_document(start))


# --- the ranges of a micro-batch --------------------------------------------------------------


def test_new_partitions_begin_at_their_log_start_and_a_gone_topic_reads_nothing():
    start, end = {A: {0: 3}}, {A: {0: 8, 1: 4}, B: {0: 6}, C: {0: 2}}
    assert partitions_without_start(start, end) == {A: [1], B: [0], C: [0]}
    begins, losses = partition_begins(start, end, {A: {1: 0}, B: {0: 2}})  # C: deleted
    assert begins == {A: {0: 3, 1: 0}, B: {0: 2}, C: {0: 2}}
    assert losses == ()


def test_a_batch_starting_past_its_end_is_data_loss_or_read_from_the_log_start():
    start, end = {A: {0: 9}}, {A: {0: 4}}
    assert partitions_without_start(start, end) == {A: [0]}
    with pytest.raises(KaskaDataLossError):
        partition_begins(start, end, {A: {0: 0}})
    begins, losses = partition_begins(start, end, {A: {0: 0}}, fail_on_data_loss=False)
    assert begins == {A: {0: 0}} and len(losses) == 1


# --- offsets ----------------------------------------------------------------------------------


def test_offsets_round_trip_through_their_json_sorted():
    offsets = {B: {10: 1, 2: 5}, A: {0: 7}}
    text = json.dumps(offsets_document(offsets))
    assert text == '{"flights.a": {"0": 7}, "flights.b": {"2": 5, "10": 1}}'
    assert parse_offsets_document(json.loads(text)) == offsets


def test_a_checkpoint_of_the_one_topic_form_is_read_as_that_topic():
    assert parse_offsets_document({"0": 5, "1": 3}, legacy_topic=A) == {A: {0: 5, 1: 3}}
    assert parse_offsets_document({}, legacy_topic=A) == {}


@pytest.mark.parametrize("document", [
    [1], {A: [1]}, {A: {"x": 1}}, {A: {"0": -1}}, {A: {"0": 1.5}}, {A: {"0": True}},
    {"0": 5},  # the one-topic form without a topic to name
])
def test_offsets_not_of_this_source_are_named_errors(document):
    with pytest.raises(KaskaOffsetsError):
        parse_offsets_document(document)


def test_initial_offsets_resolve_the_spec_for_admitted_topics_only():
    observed = {A: {0: (2, 10), 1: (0, 4)}, B: {0: (1, 5)}, C: {0: (0, 3)}}
    admissions = {A: IN, B: IN, C: OUT}
    assert initial_offsets("earliest", observed, admissions) == {A: {0: 2, 1: 0}, B: {0: 1}}
    assert initial_offsets("latest", observed, admissions) == {A: {0: 10, 1: 4}, B: {0: 5}}
    assert initial_offsets({A: {0: 5, 1: -1}}, observed, admissions) == {
        A: {0: 5, 1: 4}, B: {0: 1}}  # a topic the JSON leaves out starts at earliest
    with pytest.raises(KaskaOptionsError, match="no partitions"):
        initial_offsets({A: {7: 0}}, observed, admissions)
