"""The broker's metrics (services/broker/metrics.py): families, types and values from fake
inputs, the record count of fetched slices, and the `--metrics-listen` flag."""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

import pytest

from common.kaska.protocol.frames import Api, encode_request_header
from common.kaska.record_batch import encode_batch
from services.broker.__main__ import parse_args
from services.broker.consumer_lag import consumer_lag_family
from services.broker.metrics import BrokerCounters, api_label, records_in_slices
from services.broker.network.connection import Connection
from services.broker.replication.raft import Role
from services.broker.request_durations import RequestDurations
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.errors import StorageFullError
from tests.unit.metrics_fakes import (
    NOW_S,
    FakePartitionTable,
    fake_broker_registry,
    families,
    leader_state,
    sample_values,
)


def test_traffic_families():
    found = families(fake_broker_registry())
    assert found["kaska_requests"].type == "counter"
    requests = sample_values(found["kaska_requests"])
    ok = (("api", "produce"), ("code", "0"), ("error", "none"))
    refused = (("api", "produce"), ("code", "6"), ("error", "NotLeaderError"))
    assert requests[("kaska_requests_total", ok)] == 1
    assert requests[("kaska_requests_total", refused)] == 1
    assert requests[("kaska_requests_total", (("api", "unknown"), ("code", "6"),
                                              ("error", "NotLeaderError")))] == 1
    assert sample_values(found["kaska_produced_bytes"]) == {("kaska_produced_bytes_total", ()):
                                                            1500}
    assert sample_values(found["kaska_produced_records"])[("kaska_produced_records_total",
                                                           ())] == 15
    fetched = sample_values(found["kaska_fetched_bytes"])
    assert fetched[("kaska_fetched_bytes_total", (("api", "fetch"),))] == 1500
    assert fetched[("kaska_fetched_bytes_total", (("api", "replica_fetch"),))] == 1500
    records = sample_values(found["kaska_fetched_records"])
    assert records[("kaska_fetched_records_total", (("api", "fetch"),))] == 15
    assert found["kaska_connections"].type == "gauge"


def test_listener_families_count_open_and_refused_connections_per_listener():
    found = families(fake_broker_registry())
    assert found["kaska_listener_connections"].type == "gauge"
    assert sample_values(found["kaska_listener_connections"]) == {
        ("kaska_listener_connections", (("listener", "kaska"),)): 4,
        ("kaska_listener_connections", (("listener", "kafka"),)): 1}
    refused = sample_values(found["kaska_listener_connections_refused"])
    name = "kaska_listener_connections_refused_total"
    assert refused[(name, (("listener", "kaska"), ("reason", "full")))] == 2
    assert refused[(name, (("listener", "kaska"), ("reason", "stopping")))] == 1
    assert refused[(name, (("listener", "kafka"), ("reason", "full")))] == 0


def test_partition_families_skip_a_topic_deleted_mid_scrape():
    found = families(fake_broker_registry())
    p0 = (("partition", "0"), ("topic", "flights.c1"))
    assert sample_values(found["kaska_partition_log_end_offset"])[
        ("kaska_partition_log_end_offset", p0)] == 15
    assert sample_values(found["kaska_partition_high_watermark"])[
        ("kaska_partition_high_watermark", p0)] == 12
    assert sample_values(found["kaska_partition_size_bytes"])[
        ("kaska_partition_size_bytes", p0)] == 1516
    assert all(family.type == "gauge" for name, family in found.items()
               if name.startswith("kaska_partition_"))
    topics = {s.labels["topic"] for s in found["kaska_partition_log_end_offset"].samples}
    assert topics == {"flights.c1"}


def test_storage_families_count_refused_writes_and_episodes():
    partitions = FakePartitionTable({})
    registry = fake_broker_registry(partitions=partitions)
    assert sample_values(families(registry)["kaska_storage_full"]) == {
        ("kaska_storage_full", ()): 0}
    for _ in range(3):
        partitions.space.refused(StorageFullError(Path("segment.log"),
                                                  OSError(errno.ENOSPC, "full")))
    found = families(registry)
    assert sample_values(found["kaska_storage_full"]) == {("kaska_storage_full", ()): 1}
    assert sample_values(found["kaska_storage_refused_writes"]) == {
        ("kaska_storage_refused_writes_total", ()): 3}
    assert sample_values(found["kaska_storage_full_episodes"]) == {
        ("kaska_storage_full_episodes_total", ()): 1}


def test_leader_reports_role_epoch_commit_and_follower_lag():
    found = families(fake_broker_registry())
    roles = {s.labels["role"]: s.value for s in found["kaska_replication_role"].samples}
    assert roles == {"leader": 1, "follower": 0, "candidate": 0}
    assert found["kaska_replication_epoch"].samples[0].value == 7
    assert found["kaska_replication_commit_index"].samples[0].value == 40
    assert found["kaska_replication_leader_id"].samples[0].value == 1
    lag = {s.labels["follower"]: s.value
           for s in found["kaska_replication_follower_lag_entries"].samples}
    assert lag == {"2": 10, "3": 50}
    age = found["kaska_replication_follower_last_fetch_age_seconds"].samples
    assert [(s.labels["follower"], s.value) for s in age] == [("2", 0.25)]
    assert found["kaska_replication_elections_won"].type == "counter"
    divergences = found["kaska_replication_stale_divergences"]
    assert divergences.type == "counter" and divergences.samples[0].value == 6
    refused = sample_values(found["kaska_replication_requests_refused"])
    assert refused[("kaska_replication_requests_refused_total",
                    (("group", "0"), ("reason", "stale_epoch")))] == 2
    assert {s.labels["group"] for s in found["kaska_replication_epoch"].samples} == {"0"}
    transfers = {s.labels["outcome"]: s.value
                 for s in found["kaska_replication_leadership_transfers"].samples
                 if s.name.endswith("_total")}
    assert transfers == {"handed_over": 7, "abandoned": 8, "stood": 9}


def test_follower_reports_no_follower_lag_and_no_leader_id():
    state = replace(leader_state(), role=Role.FOLLOWER, leader_id=None)
    found = families(fake_broker_registry(state))
    assert not found["kaska_replication_follower_lag_entries"].samples
    assert found["kaska_replication_leader_id"].samples[0].value == -1
    roles = {s.labels["role"]: s.value for s in found["kaska_replication_role"].samples}
    assert roles["follower"] == 1 and roles["leader"] == 0


def test_api_label():
    assert api_label(0) == "produce"
    assert api_label(33) == "replica_fetch"
    assert api_label(12345) == "unknown"


def test_records_in_slices_reads_only_batch_headers():
    batches = [encode_batch([b"x" * n for n in range(1, count + 1)])
               for count in (3, 1, 7)]
    with tempfile.TemporaryFile() as file:
        file.write(b"KASK" * 4 + b"".join(batches))
        file.flush()
        fd = file.fileno()
        first = SimpleNamespace(fd=fd, position=16, nbytes=len(batches[0]) + len(batches[1]))
        second = SimpleNamespace(fd=fd, position=first.position + first.nbytes,
                                 nbytes=len(batches[2]))
        assert records_in_slices([first, second]) == 11
        assert records_in_slices([]) == 0
        # A slice past the end of the file (truncated meanwhile) counts what is there.
        cut = SimpleNamespace(fd=fd, position=second.position, nbytes=second.nbytes + 4096)
        assert records_in_slices([cut]) == 7
        assert os.fstat(fd).st_size == 16 + sum(map(len, batches))


def test_metrics_listen_flag():
    base = ["--node-id", "1", "--data-dir", "/tmp/d"]
    assert parse_args(base).metrics_listen is None
    assert parse_args([*base, "--metrics-listen", "0.0.0.0:9400"]).metrics_listen == (
        "0.0.0.0", 9400)


def test_bad_metrics_listen_exits_2_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--node-id", "1", "--data-dir", "/tmp/d", "--metrics-listen", "9400"])
    assert exited.value.code == 2
    assert "--metrics-listen: MetricsListenError" in capsys.readouterr().err


def _in_sync_values(state) -> dict[str, dict]:
    found = families(fake_broker_registry(state))
    return {name: {s.labels["group"]: s.value for s in found[name].samples}
            for name in ("kaska_replication_group_voters", "kaska_replication_in_sync_replicas",
                         "kaska_under_replicated_partitions")}


def test_a_leader_with_a_follower_out_of_sync_counts_its_partitions_under_replicated():
    # Broker 2 caught up 1 s ago, broker 3 never: 2 of 3 in sync; group 0 replicates the
    # fake log's three partitions (flights.c1 0 and 1, gone 0).
    state = replace(leader_state(), caught_up_s=MappingProxyType({2: NOW_S - 1.0}))
    assert _in_sync_values(state) == {
        "kaska_replication_group_voters": {"0": 3},
        "kaska_replication_in_sync_replicas": {"0": 2},
        "kaska_under_replicated_partitions": {"0": 3}}


def test_a_leader_with_every_follower_in_sync_has_no_under_replicated_partition():
    state = replace(leader_state(), caught_up_s=MappingProxyType({2: NOW_S - 1.0,
                                                                 3: NOW_S - 4.9}))
    values = _in_sync_values(state)
    assert values["kaska_replication_in_sync_replicas"] == {"0": 3}
    assert values["kaska_under_replicated_partitions"] == {"0": 0}


def test_a_follower_reports_no_in_sync_replicas_and_leads_no_under_replicated_partition():
    state = replace(leader_state(), role=Role.FOLLOWER, leader_id=2,
                    caught_up_s=MappingProxyType({2: NOW_S - 1.0}))
    values = _in_sync_values(state)
    assert values["kaska_replication_in_sync_replicas"] == {}, "only a leader can know"
    assert values["kaska_under_replicated_partitions"] == {"0": 0}
    assert values["kaska_replication_group_voters"] == {"0": 3}


def test_stalled_followers_are_a_counter_per_group():
    stalled = families(fake_broker_registry())["kaska_replication_followers_stalled"]
    assert stalled.type == "counter"
    assert sample_values(stalled) == {
        ("kaska_replication_followers_stalled_total", (("group", "0"),)): 10}


def test_request_durations_are_a_histogram_per_listener_and_api():
    found = families(fake_broker_registry())
    family = found["kaska_request_duration_seconds"]
    assert family.type == "histogram"
    values = sample_values(family)
    produce = (("api", "produce"), ("listener", "kaska"))
    assert values[("kaska_request_duration_seconds_count", produce)] == 1
    assert values[("kaska_request_duration_seconds_sum", produce)] == pytest.approx(0.004)
    assert values[("kaska_request_duration_seconds_bucket", (*produce[:1], ("le", "0.0025"),
                                                             produce[1]))] == 0
    assert values[("kaska_request_duration_seconds_bucket", (*produce[:1], ("le", "0.005"),
                                                             produce[1]))] == 1
    kafka = (("api", "Produce"), ("listener", "kafka"))
    assert values[("kaska_request_duration_seconds_count", kafka)] == 1
    # answers counted without a duration (none given) are not in the histogram
    assert ("kaska_request_duration_seconds_count",
            (("api", "fetch"), ("listener", "kaska"))) not in values


def test_request_duration_buckets_include_their_bound():
    durations = RequestDurations(buckets_s=(0.01, 1.0))
    for seconds in (0.0, 0.01, 0.5, 1.0, 30.0):
        durations.observe("kaska", "metadata", seconds)
    values = {(s.name, s.labels.get("le")): s.value for s in durations.family().samples}
    assert values == {("kaska_request_duration_seconds_bucket", "0.01"): 2,
                      ("kaska_request_duration_seconds_bucket", "1.0"): 4,
                      ("kaska_request_duration_seconds_bucket", "+Inf"): 5,
                      ("kaska_request_duration_seconds_count", None): 5,
                      ("kaska_request_duration_seconds_sum", None): pytest.approx(31.51)}


def test_a_request_answered_by_the_kaska_connection_is_observed_under_its_api():
    """One real request through Connection._serve_frame on the test's thread: the duration is
    observed before the frame's handling returns (no waiting)."""
    server_side, client_side = socket.socketpair()
    counters = BrokerCounters()
    config = SimpleNamespace(ack_timeout_s=1.0, token=None, network=SimpleNamespace(
        read_timeout_s=1.0, frame_bytes_max=1 << 20))
    connection = Connection(server_side, "test", SimpleNamespace(
        config=config, metrics=counters), on_closed=lambda _c: None)
    try:
        # A version MESSAGE_LENGTH does not have: answered UnsupportedVersion, still timed.
        header = encode_request_header(Api.MESSAGE_LENGTH, 7, 0, version=9)
        assert connection._serve_frame(header)
    finally:
        server_side.close()
        client_side.close()
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for s in counters.durations.family().samples}
    labels = (("api", "message_length"), ("listener", "kaska"))
    assert values[("kaska_request_duration_seconds_count", labels)] == 1
    assert 0 < values[("kaska_request_duration_seconds_sum", labels)] < 1.0


def test_consumer_lag_is_reported_by_the_leader_from_the_committed_offsets():
    found = families(fake_broker_registry())
    family = found["kaska_consumergroup_lag"]
    assert family.type == "gauge"
    lag = {tuple(sorted(s.labels.items())): s.value for s in family.samples}
    assert lag == {
        (("group", "spark"), ("partition", "0"), ("topic", "flights.c1")): 7,  # 12 - 5
        (("group", "spark"), ("partition", "1"), ("topic", "flights.c1")): 0,
        (("group", "ahead"), ("partition", "0"), ("topic", "flights.c1")): 0,  # never < 0
    }  # `gone` was deleted: its commit reports nothing


def test_a_follower_reports_no_consumer_lag():
    follower = replace(leader_state(), role=Role.FOLLOWER, leader_id=2)
    found = families(fake_broker_registry(follower))
    assert not found["kaska_consumergroup_lag"].samples


def test_consumer_lag_family_skips_partitions_led_elsewhere():
    commits = {("g", "t", 0): 3, ("g", "t", 1): 3, ("h", "t", 0): 10}
    asked = []

    def high_watermark(topic, partition):
        asked.append((topic, partition))
        return 10 if partition == 0 else None

    family = consumer_lag_family(commits, high_watermark)
    assert {(s.labels["group"], s.labels["partition"]): s.value for s in family.samples} == {
        ("g", "0"): 7, ("h", "0"): 0}
    assert sorted(asked) == [("t", 0), ("t", 1)]  # one lookup per partition


def test_disk_free_bytes_is_read_from_the_data_directory(tmp_path):
    partitions = FakePartitionTable({})
    partitions.space = DiskSpace(tmp_path)
    found = families(fake_broker_registry(partitions=partitions))
    (sample,) = found["kaska_disk_free_bytes"].samples
    assert found["kaska_disk_free_bytes"].type == "gauge" and sample.value > 0
    # an unreadable data directory (the fakes' default) exports no value rather than a wrong one
    assert "kaska_disk_free_bytes" not in families(fake_broker_registry())
