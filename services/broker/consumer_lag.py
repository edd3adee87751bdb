"""Consumer lag per group and partition, as kafka_exporter names it:
`kaska_consumergroup_lag{group, topic, partition}` = the partition's high watermark minus the
group's committed offset (the next offset the group will read), never below 0.

Computed at scrape time from the committed-offsets table (cluster/committed_offsets.py: every
broker holds all of it) and the high watermarks of the partitions this broker leads: only the
leader reports a partition, so summing over the brokers counts each partition once. A commit
of a deleted topic (or of a partition the topic no longer has) reports nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client.core import GaugeMetricFamily

# (group, topic, partition) -> committed offset, as CommittedOffsets.all_committed() gives it.
Commits = Mapping[tuple[str, str, int], int]
# (topic, partition) -> high watermark where this broker leads it, else None.
LeaderHighWatermark = Callable[[str, int], "int | None"]


def consumer_lag_family(commits: Commits,
                        leader_high_watermark: LeaderHighWatermark) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "kaska_consumergroup_lag", "Records a consumer group has yet to read of a partition: "
        "its high watermark minus the group's committed offset. Reported by the partition's "
        "leader only.", labels=["group", "topic", "partition"])
    high_watermarks: dict[tuple[str, int], int | None] = {}  # one lookup per partition
    for (group, topic, partition), committed in sorted(commits.items()):
        key = (topic, partition)
        if key not in high_watermarks:
            high_watermarks[key] = leader_high_watermark(topic, partition)
        high = high_watermarks[key]
        if high is not None:
            family.add_metric([group, topic, str(partition)], max(high - committed, 0))
    return family
