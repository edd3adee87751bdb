"""DeleteRecords on a real three-broker cluster (docs/replication.md, "What DeleteRecords
promises"): the log start moves on every replica once committed, each broker deletes its whole
segments below it, a fetch below it is OFFSET_OUT_OF_RANGE from whichever broker leads (after
a SIGKILL of the leader too), a follower SIGSTOPped through the delete -- and through a journal
compaction past it, so it must install the leader's snapshot -- frees its segments once it
continues, every broker keeps the start across restarts, and a producer that resumes and
re-sends a batch below the log start gets its duplicate answer: nothing is stored twice.

Segments are 16 KiB and records 1 KiB, so a partition of 120 records spans 8 segments.
"""

from __future__ import annotations

import re
import signal
import time
import uuid

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.connection import BrokerConnection
from common.kaska.errors import KaskaError, OffsetOutOfRangeError
from common.kaska.protocol.fetch import FetchRequest
from common.kaska.protocol.list_offsets import ListOffsetsRequest
from common.kaska.record_batch import iter_batches, iter_records
from services.broker.replication.placement import group_directory, group_of
from tests.integration.metrics_scrape import scrape
from tests.integration.replication.cluster import (
    FAST_ELECTIONS,
    LEADER_TIMEOUT_S,
    PROBE_TIMEOUTS,
)
from tests.integration.replication.workload import CLIENT_TIMEOUTS, RIDE_OUT_RETRY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "windowed.s1"  # partition 0 in group 1 of 3 (a data group), group 0 of 1
SEGMENT_BYTES = 16 * 1024
RECORD_BYTES = 1000
RECORDS = 120
SMALL_SEGMENTS = ("--segment-bytes-max", str(SEGMENT_BYTES))
# Small enough that the writes made while a follower is paused fold the DELETE_RECORDS entry
# into the leader's snapshot (the leader keeps entries for a follower lagging by less than
# half of it only).
JOURNAL_ENTRIES_MAX = 40
INSTALLED = re.compile(r"installed leader \d+'s snapshot")
WAIT_S = 30.0


def payload(n: int) -> bytes:
    return (b"%06d:" % n).ljust(RECORD_BYTES, b"x")


def producer(cluster, producer_id: uuid.UUID) -> Producer:
    return Producer(cluster.bootstrap, producer_id, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS)


def admin(cluster) -> Admin:
    return Admin(cluster.bootstrap, retry=RIDE_OUT_RETRY, **CLIENT_TIMEOUTS)


def produce(cluster, producer_id: uuid.UUID, first: int, count: int) -> None:
    """Records first..first+count-1, one batch each, sequences equal to their number."""
    with producer(cluster, producer_id) as client:
        for n in range(first, first + count):
            client.send_batch(TOPIC, 0, [payload(n)], sequence=n)


def wait_until(predicate, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.1)


def segment_bases(cluster, i: int) -> list[int]:
    """Base offsets of broker i's segment files of TOPIC/0 (in its replication group's
    directory: the data directory itself for group 0)."""
    group = group_of(TOPIC, 0, cluster.groups)
    directory = group_directory(cluster.brokers[i].data_dir, group) / TOPIC / "0"
    return sorted(int(path.stem) for path in directory.glob("*.log"))


def partition_leader(cluster, among=None) -> int:
    return cluster.group_leader(group_of(TOPIC, 0, cluster.groups), among=among).leader_id


def freed_below(cluster, i: int, start: int) -> bool:
    """Broker i holds no segment whose offsets all lie below `start`: its first segment
    holds `start` (or is the one starting there)."""
    bases = segment_bases(cluster, i)
    return bool(bases) and bases[0] <= start and (len(bases) == 1 or bases[1] > start)


def log_start_metric(cluster, i: int) -> int | None:
    try:
        _text, samples = scrape(cluster.brokers[i].metrics_port)
    except OSError:
        return None
    value = samples.get(("kaska_partition_log_start_offset",
                         (("partition", "0"), ("topic", TOPIC))))
    return None if value is None else int(value)


def leader_answer(cluster, request, timeout_s: float = LEADER_TIMEOUT_S):
    """Ask every live broker until one answers as the partition's leader: (broker, answer or
    the KaskaError it answered other than NOT_LEADER-like refusals)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for i in cluster.live_ids():
            try:
                connection = BrokerConnection(cluster.brokers[i].host_port, **PROBE_TIMEOUTS)
            except KaskaError:
                continue
            try:
                return i, connection.request(request)
            except OffsetOutOfRangeError as error:
                return i, error
            except KaskaError:
                continue  # not the leader (or no lease yet): the next broker
            finally:
                connection.close()
        assert time.monotonic() < deadline, f"no broker answered {request} as leader"
        time.sleep(0.1)


def records_from(cluster, offset: int) -> list[tuple[int, bytes]]:
    """What the partition's leader serves from `offset` to its high watermark."""
    _i, answer = leader_answer(cluster, FetchRequest(TOPIC, 0, offset, 1 << 22, 0))
    assert not isinstance(answer, KaskaError), answer
    return [(o, bytes(v)) for _, batch in iter_batches(bytes(answer.records))
            for o, v in iter_records(batch) if o >= offset]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("groups", [1, 3])
def test_records_go_on_every_broker_stay_gone_after_failover_and_a_retry_is_a_duplicate(
        make_cluster, groups):
    """With three replication groups the partition lives in data group 1 (its own journal,
    leader and directory `@group-1`), whose leader is the one killed."""
    assert group_of(TOPIC, 0, groups) == (0 if groups == 1 else 1)
    started = time.monotonic()
    cluster = make_cluster(extra_args=(*FAST_ELECTIONS, *SMALL_SEGMENTS), groups=groups)
    cluster.create_topic(TOPIC, 1)
    writer = uuid.uuid4()
    produce(cluster, writer, 0, RECORDS)
    cluster.wait_caught_up(TOPIC, [0])
    for i in cluster.ids:
        assert len(segment_bases(cluster, i)) >= 6, (i, segment_bases(cluster, i))

    # A start inside a segment: the segments below it go everywhere, the start is logical.
    with admin(cluster) as client:
        assert client.delete_records(TOPIC, {0: 100}) == {0: 100}
    for i in cluster.ids:
        wait_until(lambda i=i: freed_below(cluster, i, 100) and log_start_metric(cluster, i)
                   == 100, f"broker {i} frees its segments below 100")
    _leader, refused = leader_answer(cluster, FetchRequest(TOPIC, 0, 99, 1 << 20, 0))
    assert isinstance(refused, OffsetOutOfRangeError), refused
    assert records_from(cluster, 100)[0] == (100, payload(100))
    with Consumer(cluster.bootstrap, **CLIENT_TIMEOUTS) as consumer:
        assert consumer.start_offset(TOPIC, 0) == 100

    # Everything committed (-1), then the writer resumes as after a crash: it re-sends its
    # last batch, now below the log start.
    with admin(cluster) as client:
        assert client.delete_records(TOPIC, {0: -1}) == {0: RECORDS}
        assert client.delete_records(TOPIC, {0: 50}) == {0: RECORDS}, "never backwards"
        with pytest.raises(OffsetOutOfRangeError):
            client.delete_records(TOPIC, {0: RECORDS + 1})
    with producer(cluster, writer) as resumed:
        offset = resumed.send_batch(TOPIC, 0, [payload(RECORDS - 1)], sequence=RECORDS - 1)
        assert offset in (RECORDS - 1, -1), f"the retry was stored anew at {offset}"
        assert resumed.send_batch(TOPIC, 0, [payload(RECORDS)], sequence=RECORDS) == RECORDS
    assert records_from(cluster, RECORDS) == [(RECORDS, payload(RECORDS))]

    # The partition's leader dies: its successor refuses the deleted offsets too.
    leader = partition_leader(cluster)
    cluster.kill(leader, signal.SIGKILL)
    successor = partition_leader(cluster, among=cluster.others(leader))
    assert successor != leader
    answered_by, refused = leader_answer(cluster, FetchRequest(TOPIC, 0, RECORDS - 1, 1 << 20,
                                                               0))
    assert answered_by == successor and isinstance(refused, OffsetOutOfRangeError), refused
    _i, offsets = leader_answer(cluster, ListOffsetsRequest(TOPIC, 0))
    assert offsets.log_start_offset == RECORDS and offsets.log_end_offset == RECORDS + 1

    # The killed broker comes back with the start it persisted.
    cluster.start_broker(leader)
    cluster.wait_caught_up(TOPIC, [0])
    for i in cluster.ids:
        assert log_start_metric(cluster, i) == RECORDS, i
        assert freed_below(cluster, i, RECORDS), (i, segment_bases(cluster, i))
    assert records_from(cluster, RECORDS) == [(RECORDS, payload(RECORDS))], "stored once"
    assert not cluster.safety_lines()
    print(f"\n[delete records] 3 brokers, {groups} group(s), {RECORDS} records in 16 KiB "
          f"segments; moved to 100, "
          f"then the high watermark; leader {leader} killed, {successor} refused below; "
          f"{time.monotonic() - started:.1f} s")


@pytest.mark.timeout(120)
def test_a_follower_paused_through_the_delete_and_a_compaction_frees_its_segments(
        make_cluster):
    started = time.monotonic()
    cluster = make_cluster(extra_args=(*FAST_ELECTIONS, *SMALL_SEGMENTS,
                                       "--journal-entries-max", str(JOURNAL_ENTRIES_MAX)))
    cluster.create_topic(TOPIC, 1)
    writer = uuid.uuid4()
    produce(cluster, writer, 0, RECORDS)
    cluster.wait_caught_up(TOPIC, [0])
    leader = partition_leader(cluster)
    follower = cluster.others(leader)[0]
    before = segment_bases(cluster, follower)

    cluster.pause(follower)
    with admin(cluster) as client:
        assert client.delete_records(TOPIC, {0: 90}) == {0: 90}
    # More writes while it sleeps: the leader compacts its journal past the DELETE_RECORDS
    # entry, so the follower learns the start from the snapshot, not from the entry.
    produce(cluster, writer, RECORDS, 2 * JOURNAL_ENTRIES_MAX)
    wait_until(lambda: freed_below(cluster, leader, 90), "the leader frees its segments")
    assert segment_bases(cluster, follower) == before, "the paused follower did nothing"

    cluster.resume(follower)
    end = RECORDS + 2 * JOURNAL_ENTRIES_MAX
    cluster.wait_caught_up(TOPIC, [0])
    wait_until(lambda: freed_below(cluster, follower, 90)
               and log_start_metric(cluster, follower) == 90,
               f"follower {follower} frees its segments below 90")
    assert cluster.log_lines(follower, INSTALLED), "the scenario: it installed a snapshot"

    # Its start survives a SIGKILL and restart; every broker's survives a full restart.
    cluster.kill(follower, signal.SIGKILL)
    cluster.start_broker(follower)
    cluster.wait_caught_up(TOPIC, [0])
    assert log_start_metric(cluster, follower) == 90
    cluster.stop_all()
    stored = cluster.stored_partitions(TOPIC, 0)
    for i in cluster.ids:
        assert (stored[i].log_start_offset, stored[i].log_end_offset) == (90, end), i
    assert len({stored[i].data for i in cluster.ids}) == 1, "replicas hold the same bytes"
    for i in cluster.ids:
        cluster.start_broker(i)
    cluster.leader()
    for i in cluster.ids:
        wait_until(lambda i=i: log_start_metric(cluster, i) == 90, f"broker {i} restarts at 90")
    _i, refused = leader_answer(cluster, FetchRequest(TOPIC, 0, 89, 1 << 20, 0))
    assert isinstance(refused, OffsetOutOfRangeError), refused
    assert records_from(cluster, 90)[0] == (90, payload(90))
    assert not cluster.safety_lines()
    print(f"\n[delete records] follower {follower} paused through the delete and "
          f"{2 * JOURNAL_ENTRIES_MAX} more batches, installed the leader's snapshot; freed and "
          f"kept 90 across restarts; {time.monotonic() - started:.1f} s")
