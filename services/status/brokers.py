"""The brokers' state, scraped from their Prometheus `/metrics` (services/broker/metrics.py):
role, epoch, the leader they know (all of the metadata group, group 0, where topics are made:
the cluster's controller), the replication groups each leads with their health as only a
group's leader knows it (voters, in-sync replicas, under-replicated partitions), and per
partition the log end offset and high watermark.

`broker_report_from_text` is pure (the exposition text in, a `BrokerReport` out); only
`scrape_broker` touches the network.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

ANSWER_BYTES_MAX = 32 * 1024 * 1024
METADATA_GROUP = "0"  # the `group` label of the metadata group's replication metrics
NO_LEADER_ID = -1


class BrokerUnreachableError(Exception):
    """The broker's metrics endpoint did not answer in time or refused the connection."""


class MalformedBrokerMetricsError(ValueError):
    """Metrics text that does not parse or lacks the replication gauges."""


@dataclass(frozen=True)
class GroupHealth:
    """A replication group as its leader reports it (services/broker/metrics.py)."""

    epoch: int
    voters: int  # configured, learners included
    in_sync: int  # voters caught up to the leader within its lag bound, the leader included
    under_replicated_partitions: int


@dataclass(frozen=True)
class BrokerReport:
    name: str
    node_id: int
    role: str
    epoch: int
    leader_id: int | None
    commit_index: int
    # (topic, partition) -> (log end offset, high watermark)
    partitions: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    follower_lag_entries: dict[int, int] = field(default_factory=dict)  # leader only
    produced_records: int = 0
    led_groups: tuple[int, ...] = ()  # the replication groups this broker leads
    groups: tuple[int, ...] = ()  # the replication groups it runs (every broker runs all)
    # The groups it leads that report their in-sync replicas (a broker without them: none).
    group_health: dict[int, GroupHealth] = field(default_factory=dict)


def _samples(text: str) -> list:
    try:
        return [sample for family in text_string_to_metric_families(text)
                for sample in family.samples]
    except ValueError as error:  # the parser's error for a malformed exposition
        raise MalformedBrokerMetricsError(f"metrics do not parse: {error}") from error


def broker_report_from_text(name: str, node_id: int, text: str) -> BrokerReport:
    gauges: dict[str, float] = {}
    role = None
    ends: dict[tuple[str, int], int] = {}
    highs: dict[tuple[str, int], int] = {}
    lags: dict[int, int] = {}
    led: list[str] = []
    per_group: dict[str, dict[str, float]] = {}
    groups: set[int] = set()
    for sample in _samples(text):
        labels = sample.labels
        metadata_group = labels.get("group", METADATA_GROUP) == METADATA_GROUP
        if sample.name in _GROUP_HEALTH:
            per_group.setdefault(labels.get("group", METADATA_GROUP), {})[sample.name] = \
                sample.value
        if sample.name == "kaska_replication_role":
            groups.add(int(labels.get("group", METADATA_GROUP)))
        if sample.name == "kaska_replication_role" and sample.value == 1:
            if labels["role"] == "leader":
                led.append(labels.get("group", METADATA_GROUP))
            if metadata_group:
                role = labels["role"]
        elif sample.name in ("kaska_partition_log_end_offset", "kaska_partition_high_watermark"):
            target = ends if sample.name.endswith("end_offset") else highs
            target[(labels["topic"], int(labels["partition"]))] = int(sample.value)
        elif sample.name == "kaska_replication_follower_lag_entries":
            if metadata_group:
                lags[int(labels["follower"])] = int(sample.value)
        elif metadata_group:
            gauges[sample.name] = sample.value
    if role is None or "kaska_replication_epoch" not in gauges:
        raise MalformedBrokerMetricsError(f"{name}: no replication role or epoch in its metrics")
    leader = int(gauges.get("kaska_replication_leader_id", NO_LEADER_ID))
    return BrokerReport(
        name=name, node_id=node_id, role=role, epoch=int(gauges["kaska_replication_epoch"]),
        leader_id=None if leader == NO_LEADER_ID else leader,
        commit_index=int(gauges.get("kaska_replication_commit_index", 0)),
        partitions={key: (end, highs.get(key, 0)) for key, end in ends.items()},
        follower_lag_entries=lags,
        produced_records=int(gauges.get("kaska_produced_records_total", 0)),
        led_groups=tuple(sorted(int(group) for group in led)), groups=tuple(sorted(groups)),
        group_health=_group_health(per_group, led))


_IN_SYNC = "kaska_replication_in_sync_replicas"
_GROUP_HEALTH = ("kaska_replication_epoch", "kaska_replication_group_voters", _IN_SYNC,
                 "kaska_under_replicated_partitions")


def _group_health(per_group: dict[str, dict[str, float]],
                  led: list[str]) -> dict[int, GroupHealth]:
    """The led groups whose in-sync replicas are reported (a broker of before they existed
    reports none: unknown, not healthy)."""
    health = {}
    for group in led:
        values = per_group.get(group, {})
        if _IN_SYNC not in values:
            continue
        health[int(group)] = GroupHealth(
            epoch=int(values.get("kaska_replication_epoch", 0)),
            voters=int(values.get("kaska_replication_group_voters", 0)),
            in_sync=int(values[_IN_SYNC]),
            under_replicated_partitions=int(values.get("kaska_under_replicated_partitions", 0)))
    return health


def scrape_broker(name: str, node_id: int, address: tuple[str, int],
                  timeout_s: float) -> BrokerReport:
    host, port = address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as answer:
            body = answer.read(ANSWER_BYTES_MAX + 1)
    except (OSError, urllib.error.URLError) as error:
        raise BrokerUnreachableError(f"{name} at {host}:{port}: {error}") from error
    if len(body) > ANSWER_BYTES_MAX:
        raise MalformedBrokerMetricsError(f"{name}: metrics over {ANSWER_BYTES_MAX} bytes")
    return broker_report_from_text(name, node_id, body.decode("utf-8", errors="replace"))
