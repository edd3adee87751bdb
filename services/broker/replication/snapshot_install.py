"""The storage side of a follower's install of the leader's snapshot (Raft §7, docs/replication.md
"Compaction"): make the data directory's topics the snapshot's (`make_topics`), then copy each
partition's bytes up to the snapshot's end from the leader with SNAPSHOT_FETCH
(`copy_partition`).

`FollowerFetching._install_snapshot` (follower_fetch.py) drives it: the topics under the node's
`_lock`, the copies outside it (network waits never hold `_lock`), and only once every copy is
done and synced the journal is replaced by the snapshot, under `_lock`. A crash before that
leaves the old journal, and `reconcile` drops what it does not name (fetched again later).

Invariants: a partition never keeps bytes past the snapshot's end (they may be another leader's);
the bytes copied are the leader's, appended in order, each batch once; a copied partition is
fsynced before `copy_partition` returns True; a partition whose incarnation the leader has
deleted since its snapshot (GONE: the delete is committed, past the snapshot's end) is skipped
to its end, never waited for; a refused, failed or non-continuing answer ends the copy (False)
and the install is abandoned for this round -- the next round asks again.

Threads: the replication loop thread only (the one that changes a follower's partitions);
`make_topics` under the node's `_lock`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.kaska.record_batch import iter_batches
from common.kaska.topic_name import is_internal
from services.broker.replication.config import ReplicationConfig
from services.broker.replication.entry_effects import HighWatermarks
from services.broker.replication.journal import Journal
from services.broker.replication.peer_requests import PeerRequests
from services.broker.replication.snapshot import forget_topic
from services.broker.replication.wire.snapshot_fetch import (
    NO_TOPIC_ID,
    SnapshotFetchOutcome,
    SnapshotFetchRequest,
    SnapshotFetchResponse,
    SnapshotTopic,
)
from services.broker.storage.log import Log

log = logging.getLogger(__name__)


def make_topics(journal: Journal, log_store: Log, hw: HighWatermarks,
                topics: dict[str, SnapshotTopic],
                on_topic_deleted: Callable[[str], None]) -> None:
    """The data directory's topics become the snapshot's: an incarnation it does not name
    was deleted by a committed entry it folded, a missing one is created."""
    present = log_store.topics()
    for name, count in sorted(present.items()):
        if is_internal(name):
            continue
        wanted = topics.get(name)
        if (wanted is not None and wanted.partitions == count and journal.incarnation(
                name) == (wanted.id_epoch, wanted.id_index)):
            continue
        log_store.delete_topic(name)
        forget_topic(hw, name)
        on_topic_deleted(name)
    present = log_store.topics()
    for name, wanted in sorted(topics.items()):
        if name not in present:
            log_store.create_topic(name, wanted.partitions)


def copy_partition(requests: PeerRequests, log_store: Log, config: ReplicationConfig,
                   leader: int, epoch: int, topic: str, number: int, end: int,
                   described: SnapshotTopic | None) -> bool:
    """Copy the leader's bytes of one partition up to `end`; False when the leader refused
    or did not answer (the install is abandoned for this round)."""
    if topic not in log_store.topics():
        return True  # an internal topic this broker does not hold yet: nothing to copy
    partition = log_store.partition(topic, number)
    if partition.log_end_offset > end:
        partition.truncate_to(end)  # past the snapshot: never another leader's bytes
    id_epoch, id_index = ((NO_TOPIC_ID, NO_TOPIC_ID) if described is None
                          else (described.id_epoch, described.id_index))
    while partition.log_end_offset < end:
        held = partition.log_end_offset
        request = SnapshotFetchRequest(config.node_id, epoch, topic, id_epoch, id_index,
                                       number, held, end, config.fetch_bytes_max)
        future = requests.send(leader, request)
        answer = None if future is None else requests.result(
            leader, future, SnapshotFetchResponse, config.request_timeout_s)
        if answer is not None and answer.outcome is SnapshotFetchOutcome.GONE:
            # The leader of this epoch deleted (or replaced) the incarnation since its
            # snapshot, by a committed entry past the snapshot's end that this follower
            # applies next: nobody reads these bytes again, so they are skipped, as a SKIPPED
            # entry skips a deleted batch. Abandoning the install instead would ask for the
            # same snapshot on every fetch until the leader compacts past the delete.
            log.info("broker %d: leader %d deleted %s/%d since its snapshot; the partition "
                     "restarts at %d", config.node_id, leader, topic, number, end)
            partition.restart_at(end)
            break
        if answer is None or answer.outcome is not SnapshotFetchOutcome.DATA:
            log.info("broker %d: snapshot install stopped at %s/%d offset %d (%s)",
                     config.node_id, topic, number, held,
                     "no answer" if answer is None else answer.outcome.name)
            return False
        if held < answer.log_start_offset:
            partition.restart_at(min(answer.log_start_offset, end))  # retention
        if not answer.data:
            if partition.log_end_offset < end:
                log.warning("broker %d: leader %d has no bytes of %s/%d from %d to %d; "
                            "the partition restarts at %d", config.node_id, leader,
                            topic, number, partition.log_end_offset, end, end)
                partition.restart_at(end)
            break
        for header, batch in iter_batches(answer.data):
            if header.next_offset <= partition.log_end_offset:
                continue  # the leader's answer starts with the batch holding `held`
            partition.append_replica(batch)
        if partition.log_end_offset <= held:
            log.warning("broker %d: leader %d's bytes of %s/%d at %d do not continue this "
                        "partition; snapshot install stopped", config.node_id, leader,
                        topic, number, held)
            return False
    partition.sync()
    return True
