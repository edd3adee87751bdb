"""Pure planning of the `kaska` stream: offsets, discovery, gate, read limit, data loss.

No I/O: the stream reader (spark/source/kaska_stream.py) observes the brokers and the gate, and
these functions decide. Terms:
- `Offsets`: {topic: {partition: next offset to read}}, the stream's position. On the wire
  (Spark's checkpoint, `latestOffset`'s answer) it is the JSON object
  `{"<topic>": {"<partition>": offset}}`, topics and partitions sorted, so that an unchanged
  position is the very same text (Spark compares offsets as text to see whether there is new
  data).
- `Observed`: {topic: {partition: (log start offset, high watermark)}} of the topics that exist
  and that the subscription matches, as one `latestOffset` call saw them.

Invariants of `plan_latest`: an end is never below its start's effective begin, never above the
partition's high watermark or the gate's cap (unless the start itself is already past them: then
end == start), and the ends' total minus the begins' total is at most the read limit.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from spark.source.kaska_gate import TopicAdmission
from spark.source.kaska_options import (
    EARLIEST,
    EARLIEST_SENTINEL,
    LATEST,
    LATEST_SENTINEL,
    KaskaOptionsError,
    TopicsOffsetSpec,
    topic_spec,
)

Offsets = dict[str, dict[int, int]]
Bounds = tuple[int, int]  # (log start offset, high watermark) of one partition
Observed = Mapping[str, Mapping[int, Bounds]]
K = TypeVar("K", bound=Hashable)

DATA_LOSS_HINT = ("(set failOnDataLoss to false to skip to the log start and go on, as Kafka's "
                  "source does)")


class KaskaDataLossError(RuntimeError):
    """Records the stream was still to read are gone (deleted, or their topic deleted)."""


class KaskaOffsetsError(ValueError):
    """A stream offset (from Spark's checkpoint) that is not this source's format."""


# --- the offsets' wire form -------------------------------------------------------------------


def offsets_document(offsets: Mapping[str, Mapping[int, int]]) -> dict:
    """`{"<topic>": {"<partition>": offset}}`, sorted (the same position, the same text)."""
    return {topic: {str(p): offsets[topic][p] for p in sorted(offsets[topic])}
            for topic in sorted(offsets)}


def parse_offsets_document(document: Mapping, legacy_topic: str | None = None) -> Offsets:
    """The inverse of `offsets_document`. A checkpoint of the one-topic form this source had
    before (`{"<partition>": offset}`) is read as `legacy_topic`'s offsets."""
    if not isinstance(document, Mapping):
        raise KaskaOffsetsError(f"stream offsets must be a JSON object: {document!r}")
    values = list(document.values())
    if legacy_topic is not None and values and all(isinstance(v, int) for v in values):
        document = {legacy_topic: document}
    offsets: Offsets = {}
    for topic, per_partition in document.items():
        if not isinstance(per_partition, Mapping):
            raise KaskaOffsetsError(f"offsets of {topic!r} must be an object: {document!r}")
        offsets[topic] = {}
        for partition, offset in per_partition.items():
            valid = (str(partition).isdigit() and isinstance(offset, int)
                     and not isinstance(offset, bool) and offset >= 0)
            if not valid:
                raise KaskaOffsetsError(f"bad offset {topic}/{partition}: {offset!r}")
            offsets[topic][int(partition)] = offset
    return offsets


# --- the start --------------------------------------------------------------------------------


def initial_offsets(spec: TopicsOffsetSpec, observed: Observed,
                    admissions: Mapping[str, TopicAdmission]) -> Offsets:
    """Where a new query starts: every admitted observed topic at `startingOffsets` (a
    partition the JSON leaves out, and a topic it does not name, start at earliest)."""
    offsets: Offsets = {}
    for topic in sorted(observed):
        if not admissions[topic].admitted:
            continue
        given = topic_spec(spec, topic)
        partitions = observed[topic]
        unknown = set(given) - set(partitions) if isinstance(given, dict) else set()
        if unknown:
            raise KaskaOptionsError(f"{topic} has no partitions {sorted(unknown)}")
        offsets[topic] = {}
        for partition, (log_start, high_watermark) in sorted(partitions.items()):
            wanted = given if isinstance(given, str) else given.get(partition, EARLIEST)
            if wanted in (EARLIEST, EARLIEST_SENTINEL):
                wanted = log_start
            elif wanted in (LATEST, LATEST_SENTINEL):
                wanted = high_watermark
            offsets[topic][partition] = wanted
    return offsets


# --- the end of a micro-batch -----------------------------------------------------------------


@dataclass(frozen=True)
class LatestPlan:
    ends: Offsets  # what `latestOffset` answers
    readable: Offsets  # min(high watermark, cap) of every followed partition
    losses: tuple[str, ...]  # data lost (only when failOnDataLoss is false; else raised)


def plan_latest(start: Offsets, observed: Observed, admissions: Mapping[str, TopicAdmission],
                last_readable: Offsets, rows_max: int | None,
                fail_on_data_loss: bool = True) -> LatestPlan:
    """The micro-batch after `start`. `last_readable`: the previous plan's `readable` (what
    the stream knew was there to read: a topic gone with its start below it lost records; one
    gone after it was read whole is dropped quietly). `rows_max`: the read limit in records
    (None: all available). KaskaDataLossError names every loss unless `fail_on_data_loss` is
    false."""
    losses = _vanished_losses(start, observed, last_readable)
    begins: dict[tuple[str, int], int] = {}
    limits: dict[tuple[str, int], int] = {}
    held: Offsets = {}
    readable: Offsets = {}
    for topic in sorted(observed):
        admission = admissions[topic]
        if not admission.admitted:
            if topic in start:
                held[topic] = dict(start[topic])
            continue
        caps = admission.end_offsets or {}
        readable[topic] = {}
        for partition, (log_start, high_watermark) in sorted(observed[topic].items()):
            begin, loss = _begin(topic, partition, start.get(topic, {}).get(partition),
                                 log_start, high_watermark)
            if loss:
                losses.append(loss)
            cap = min(high_watermark, caps.get(partition, high_watermark))
            readable[topic][partition] = cap
            begins[(topic, partition)] = begin
            limits[(topic, partition)] = max(begin, cap)
    if losses and fail_on_data_loss:
        raise KaskaDataLossError("; ".join(losses) + " " + DATA_LOSS_HINT)
    ends = split_limit(begins, limits, rows_max)
    planned: Offsets = held
    for (topic, partition), end in ends.items():
        planned.setdefault(topic, {})[partition] = end
    return LatestPlan(planned, readable, tuple(losses))


def _begin(topic: str, partition: int, start: int | None, log_start: int,
           high_watermark: int) -> tuple[int, str | None]:
    """Where a partition's next read begins, and the data loss that moved it, if any."""
    if start is None:  # a new topic or partition: from its earliest offset
        return log_start, None
    if start < log_start:
        return log_start, (f"{topic}/{partition}: offsets [{start}, {log_start}) were deleted "
                           "before the stream read them")
    if start > high_watermark:
        return log_start, (f"{topic}/{partition}: the stream is at offset {start} but the "
                           f"log ends at {high_watermark} (the topic was deleted and created "
                           "again?)")
    return start, None


def _vanished_losses(start: Offsets, observed: Observed, last_readable: Offsets) -> list[str]:
    """Partitions of `start` that no longer exist, with records the stream knew and had not
    read (after a restart nothing is known: a vanished topic is dropped quietly)."""
    losses = []
    for topic in sorted(start):
        for partition, offset in sorted(start[topic].items()):
            if partition in observed.get(topic, {}):
                continue
            known = last_readable.get(topic, {}).get(partition)
            if known is not None and offset < known:
                losses.append(f"{topic}/{partition} was deleted with offsets [{offset}, "
                              f"{known}) unread")
    return losses


def split_limit(begins: Mapping[K, int], ends: Mapping[K, int],
                rows_max: int | None) -> dict[K, int]:
    """Ends at most `rows_max` records past `begins` in total, shared as Spark's Kafka source
    shares `maxOffsetsPerTrigger`: in proportion to each partition's lag (ends - begins), every
    partition with lag getting at least one record when the limit allows one each (if not, the
    `rows_max` largest lags get one), never past its end. Deterministic: ties go in key order.
    """
    lags = {key: ends[key] - begins[key] for key in sorted(ends)}
    assert all(lag >= 0 for lag in lags.values()), "an end below its begin"
    total = sum(lags.values())
    if rows_max is None or total <= rows_max:
        return dict(ends)
    lagging = [key for key, lag in lags.items() if lag > 0]
    if rows_max < len(lagging):
        chosen = sorted(lagging, key=lambda key: -lags[key])[:rows_max]  # stable: key order
        return {key: begins[key] + (1 if key in chosen else 0) for key in lags}
    reads = _proportional_reads({key: lags[key] for key in lagging}, rows_max)
    return {key: begins[key] + reads.get(key, 0) for key in lags}


def _proportional_reads(lags: Mapping[K, int], rows_max: int) -> dict[K, int]:
    """`rows_max` (at least one per lag) shared in proportion to `lags`: a lag whose share
    is below one record gets one (Kafka rounds those up), the rest is shared among the others;
    repeated, as setting those aside lowers the others' shares."""
    reads: dict[K, int] = {}
    rest, amount = dict(lags), rows_max
    while rest:
        total = sum(rest.values())
        small = [key for key, lag in rest.items() if amount * lag < total]
        if not small:
            break
        for key in small:
            reads[key] = 1
            del rest[key]
        amount -= len(small)
    if rest and amount >= sum(rest.values()):
        return reads | dict(rest)
    return reads | (_largest_remainder(rest, amount) if rest else {})


def _largest_remainder(weights: Mapping[K, int], amount: int) -> dict[K, int]:
    """`amount` split in proportion to `weights` (integers summing to more than `amount`):
    floors first, the rest one each to the largest remainders (ties in key order); no share
    exceeds its weight."""
    total = sum(weights.values())
    assert total > amount >= 0
    floors = {key: amount * weight // total for key, weight in weights.items()}
    remainders = {key: amount * weight % total for key, weight in weights.items()}
    left = amount - sum(floors.values())
    for key in sorted(sorted(weights), key=lambda key: -remainders[key])[:left]:
        floors[key] += 1
    return floors


# --- the ranges of a micro-batch --------------------------------------------------------------


def partitions_without_start(start: Offsets, end: Offsets) -> dict[str, list[int]]:
    """Partitions of `end` whose begin `partition_ranges` needs as their log start: new ones
    (not in `start`) and those whose start is past their end (a recreated topic)."""
    wanted: dict[str, list[int]] = {}
    for topic in sorted(end):
        for partition, offset in sorted(end[topic].items()):
            begin = start.get(topic, {}).get(partition)
            if begin is None or begin > offset:
                wanted.setdefault(topic, []).append(partition)
    return wanted


def partition_begins(start: Offsets, end: Offsets, log_starts: Mapping[str, Mapping[int, int]],
                     fail_on_data_loss: bool = True) -> tuple[Offsets, tuple[str, ...]]:
    """Where each partition of `end` is read from in the micro-batch [start, end): its start,
    or its log start when it is new (`log_starts` has those `partitions_without_start` named;
    one missing there is gone: nothing to read). A start past its end is data loss."""
    begins: Offsets = {}
    losses = []
    for topic in sorted(end):
        begins[topic] = {}
        for partition, offset in sorted(end[topic].items()):
            begin = start.get(topic, {}).get(partition)
            if begin is not None and begin > offset:
                losses.append(f"{topic}/{partition}: the micro-batch starts at {begin}, past "
                              f"its end {offset} (the topic was deleted and created again?)")
                begin = None
            if begin is None:
                begin = log_starts.get(topic, {}).get(partition, offset)
            begins[topic][partition] = min(begin, offset)
    if losses and fail_on_data_loss:
        raise KaskaDataLossError("; ".join(losses) + " " + DATA_LOSS_HINT)
    return begins, tuple(losses)
