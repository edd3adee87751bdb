"""The `kaska` source's streaming reader: one query following every topic of a subscription.

What Spark calls, on the driver (one reader per query, in one long-lived Python process):
- `initialOffset()`: the matched, admitted topics at `startingOffsets` (a new query only; a
  restarted one resumes from its checkpoint).
- `getDefaultReadLimit()`: `ReadMaxRows(maxOffsetsPerTrigger)`, or all available.
- `latestOffset(start, limit)`: lists the topics (every call: new ones are discovered, deleted
  ones dropped), asks the gate about each matched one, reads each partition's (log start, high
  watermark) and plans the micro-batch's end with `kaska_plan.plan_latest` under `limit` (the
  limit Spark passes wins: `ReadAllAvailable` ignores `maxOffsetsPerTrigger`).
- `partitions(start, end)`: the offset ranges (new partitions from their log start).
- `commit(end)`: with `commitGroup`, each topic partition's end committed for the group.
- `reportLatestOffset()`: how far the followed topics could be read (high watermarks under the
  gate's caps) at the last `latestOffset`, for the query progress's `latestOffset`.
The tasks then `read` each range in the Python workers (spark/source/kaska_read.py).

Offsets format: `{"<topic>": {"<partition>": next offset}}` (spark/source/kaska_plan.py).

Cost per `latestOffset`: one topic list plus one ListOffsets request per partition of every
matched topic (the brokers have no batched form), plus one gate call per matched topic.

Thread-safety: Spark calls a reader from one thread; the broker connection it keeps between
calls is closed by `stop()`.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from common.backoff import Backoff
from common.kaska.cluster import Cluster
from common.kaska.consumer import Consumer
from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.protocol import ListOffsetsRequest, ListTopicsRequest
from spark.source.kaska_gate import TopicAdmission, bound_gate
from spark.source.kaska_options import KaskaOptions, KaskaOptionsError
from spark.source.kaska_plan import (
    Bounds,
    Observed,
    Offsets,
    initial_offsets,
    offsets_document,
    parse_offsets_document,
    partition_begins,
    partitions_without_start,
    plan_latest,
)
from spark.source.kaska_read import (
    OffsetRange,
    arrow_schema_of,
    columns_of,
    plan_ranges,
    read_range,
)

log = logging.getLogger(__name__)


# The client says "no leader known" (an election under way) as UnknownTopicOrPartitionError,
# as it says "no such topic". Only a topic missing from the listing is gone; one still listed
# is asked again, with these pauses, for at most the options' retryDeadlineS.
NOT_LED_BACKOFF = Backoff(initial_s=0.05, max_s=1.0)


class TopicNotLedError(RuntimeError):
    """A listed topic's partition had no leader for the whole retry deadline: the micro-batch's
    planning fails (the query restarts) rather than guess the partition's offsets."""


class TopicProbe:
    """What the brokers hold of the topics a stream follows (driver side)."""

    def __init__(self, options: KaskaOptions, cluster: Cluster | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._cluster = cluster or Cluster(options.brokers, token=options.token)
        self._retry_deadline_s = options.retry_deadline_s
        self._clock = clock
        self._sleep = sleep

    def observe(self, follows: Callable[[str], bool]) -> Observed:
        """{topic: {partition: (log start, high watermark)}} of every existing topic that
        `follows`; a topic deleted while it is being asked about is left out."""
        listing = self._cluster.call(ListTopicsRequest(False)).topics
        observed = {}
        for topic, partition_count in sorted(listing.items()):
            if not follows(topic):
                continue
            try:
                observed[topic] = {p: self.bounds(topic, p) for p in range(partition_count)}
            except UnknownTopicOrPartitionError:
                log.info("%s: deleted while listed", topic)
        return observed

    def log_starts(self, wanted: Mapping[str, list[int]]) -> dict[str, dict[int, int]]:
        """The log start of each partition named (a deleted topic is left out)."""
        starts: dict[str, dict[int, int]] = {}
        for topic, partitions in wanted.items():
            try:
                starts[topic] = {p: self.bounds(topic, p)[0] for p in partitions}
            except UnknownTopicOrPartitionError:
                log.info("%s: gone before its ranges were planned", topic)
        return starts

    def bounds(self, topic: str, partition: int) -> Bounds:
        """(log start, high watermark); UnknownTopicOrPartitionError only for a topic the
        brokers no longer list. Taking an election for a deletion cost a new topic its first
        micro-batch: planned from a log start never learned, its range was empty, and the
        stream's offsets moved past records it never read."""
        deadline = self._clock() + self._retry_deadline_s
        for attempt in itertools.count():
            try:
                response = self._cluster.call(ListOffsetsRequest(topic, partition),
                                              route=(topic, partition),
                                              no_retry=(UnknownTopicOrPartitionError,))
                return response.log_start_offset, response.log_end_offset
            except UnknownTopicOrPartitionError as error:
                if not self._listed(topic):
                    raise
                if self._clock() >= deadline:
                    raise TopicNotLedError(
                        f"{topic}/{partition} is listed but no broker led it for "
                        f"{self._retry_deadline_s:g} s: {error}") from error
                self._sleep(NOT_LED_BACKOFF.delay_s(attempt))
        raise AssertionError("unreachable")

    def _listed(self, topic: str) -> bool:
        return topic in self._cluster.call(ListTopicsRequest(False)).topics

    def close(self) -> None:
        self._cluster.close()


class KaskaStreamReader(DataSourceStreamReader):
    def __init__(self, options: KaskaOptions, schema: StructType) -> None:
        self.options = options
        self.columns = options.columns if options.arrow_transform else columns_of(schema)
        self.schema = schema
        self._gate = bound_gate(options)
        self._probe: TopicProbe | None = None
        self._readable: Offsets = {}  # the last plan's readable ends

    def _topic_probe(self) -> TopicProbe:
        if self._probe is None:
            self._probe = TopicProbe(self.options)
        return self._probe

    def _observe(self) -> tuple[Observed, dict[str, TopicAdmission]]:
        observed = self._topic_probe().observe(self.options.follows)
        return observed, {topic: self._gate(topic) for topic in observed}

    def initialOffset(self) -> dict:
        observed, admissions = self._observe()
        return offsets_document(initial_offsets(self.options.starting, observed, admissions))

    def getDefaultReadLimit(self) -> ReadLimit:
        records_max = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if records_max is None else ReadMaxRows(records_max)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        start_offsets = parse_offsets_document(start or {}, self.options.topic)
        observed, admissions = self._observe()
        plan = plan_latest(start_offsets, observed, admissions, self._readable,
                           records_max_of(limit), self.options.fail_on_data_loss)
        for loss in plan.losses:
            log.warning("data loss (failOnDataLoss is false: skipped): %s", loss)
        self._readable = plan.readable
        return offsets_document(plan.ends)

    def reportLatestOffset(self) -> dict | None:
        return offsets_document(self._readable) if self._readable else None

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        starts = parse_offsets_document(start, self.options.topic)
        ends = parse_offsets_document(end, self.options.topic)
        wanted = partitions_without_start(starts, ends)
        log_starts = self._topic_probe().log_starts(wanted) if wanted else {}
        begins, losses = partition_begins(starts, ends, log_starts,
                                          self.options.fail_on_data_loss)
        for loss in losses:
            log.warning("data loss (failOnDataLoss is false: skipped): %s", loss)
        return [offset_range for topic in sorted(ends)
                for offset_range in plan_ranges(topic, begins[topic], ends[topic],
                                                self.options.offsets_per_slice_max)]

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, self.columns, arrow_schema_of(self.schema), partition)

    def commit(self, end: dict) -> None:
        if self.options.commit_group is None:
            return
        offsets = parse_offsets_document(end, self.options.topic)
        with Consumer(self.options.brokers, self.options.commit_group,
                      token=self.options.token) as consumer:
            for topic, per_partition in sorted(offsets.items()):
                for partition, offset in sorted(per_partition.items()):
                    consumer.commit(topic, offset, partition)

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None


def records_max_of(limit: ReadLimit | None) -> int | None:
    """The records a `latestOffset` may add under `limit` (None: no bound)."""
    if limit is None or isinstance(limit, ReadAllAvailable):
        return None
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    raise KaskaOptionsError(f"the kaska source supports ReadMaxRows and ReadAllAvailable "
                            f"limits, not {limit!r}")
