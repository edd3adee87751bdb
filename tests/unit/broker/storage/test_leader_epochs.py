"""The leader epoch cache (Kafka's LeaderEpochFileCache) and the partition log keeping it:
appends, recovery, truncation, log start moves, and OffsetForLeaderEpoch's answers."""

import pytest

from services.broker.storage.leader_epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    LeaderEpochCache,
)
from services.broker.storage.partition import PartitionLog

from .batches import SMALL, sized_batch

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


# -- the cache alone ----------------------------------------------------------------------


def test_assign_keeps_the_first_offset_of_each_epoch():
    cache = cache_of((1, 0), (1, 5), (3, 10), (3, 12), (4, 20))
    assert cache.entries() == ((1, 0), (3, 10), (4, 20))


def test_batches_without_an_epoch_add_nothing():
    assert cache_of((-1, 0), (2, 3)).entries() == ((2, 3),)


def test_an_older_epoch_drops_the_entries_it_contradicts():
    cache = cache_of((1, 0), (5, 10))
    cache.assign(3, 12)
    assert cache.entries() == ((1, 0), (3, 12))


@pytest.mark.parametrize(
    ("requested", "answer"),
    [
        (0, (0, 0)),  # below every epoch held: the first epoch's start, the epoch asked
        (1, (1, 10)),  # ends where the next held epoch starts
        (2, (1, 10)),  # not held: the epoch below it, and the next one's start
        (3, (3, 25)),
        (4, (4, 40)),  # the latest epoch ends at the log end
        (5, UNDEFINED),  # above every epoch known
        (-1, UNDEFINED),
    ],
)
def test_end_offset_follows_kafkas_semantics(requested, answer):
    cache = cache_of((1, 0), (3, 10), (4, 25))
    # The first epoch's data below 0 is gone: the cache starts at 0 with epoch 1.
    cache.truncate_from_start(0)
    assert cache.end_offset_for(requested, log_end_offset=40) == answer


def test_the_current_epoch_counts_before_its_first_batch():
    cache = cache_of((1, 0), (3, 10))
    # A leader elected at epoch 6, no batch of it yet: epoch 3 ends at the log end.
    assert cache.end_offset_for(3, log_end_offset=30, current_epoch=6) == (3, 30)
    assert cache.end_offset_for(5, log_end_offset=30, current_epoch=6) == (3, 30)
    assert cache.end_offset_for(6, log_end_offset=30, current_epoch=6) == (6, 30)
    assert cache.end_offset_for(7, log_end_offset=30, current_epoch=6) == UNDEFINED


def test_an_empty_cache_knows_only_the_current_epoch():
    cache = LeaderEpochCache()
    assert cache.end_offset_for(2, log_end_offset=7) == UNDEFINED
    assert cache.end_offset_for(2, log_end_offset=7, current_epoch=4) == (2, 7)


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_end():
    cache = cache_of((1, 0), (3, 10), (4, 25))
    cache.truncate_from_end(25)
    assert cache.entries() == ((1, 0), (3, 10))
    cache.truncate_from_end(11)
    assert cache.entries() == ((1, 0), (3, 10))


def test_truncate_from_start_moves_the_epoch_holding_the_new_start():
    cache = cache_of((1, 0), (3, 10), (4, 25))
    cache.truncate_from_start(12)
    assert cache.entries() == ((3, 12), (4, 25))
    cache.truncate_from_start(25)
    assert cache.entries() == ((4, 25),)
    assert cache.end_offset_for(1, log_end_offset=30) == (1, 25)


# -- in the partition log -----------------------------------------------------------------


def filled(path, epochs: list[int]) -> PartitionLog:
    """One 500-byte batch (one record) per epoch in `epochs`, in order."""
    part = PartitionLog(path, SMALL)
    for i, epoch in enumerate(epochs):
        part.append(sized_batch(500, i), leader_epoch=epoch)
    return part


EPOCHS = [1] * 10 + [3] * 6 + [4] * 4  # 20 batches over 3 segments (8 per segment)


def test_appends_feed_the_cache(tmp_path):
    part = filled(tmp_path / "p", EPOCHS)
    assert part.leader_epochs() == ((1, 0), (3, 10), (4, 16))
    assert part.end_offset_for_epoch(1) == (1, 10)
    assert part.end_offset_for_epoch(4) == (4, 20)
    assert part.end_offset_for_epoch(2, current_epoch=7) == (1, 10)
    part.close()


def test_recovery_rebuilds_the_cache_from_the_batches(tmp_path):
    filled(tmp_path / "p", EPOCHS).close()
    part = PartitionLog(tmp_path / "p", SMALL)
    assert part.segment_count == 3  # the scan crossed segments
    assert part.leader_epochs() == ((1, 0), (3, 10), (4, 16))
    part.close()


def test_truncation_cuts_the_cache(tmp_path):
    part = filled(tmp_path / "p", EPOCHS)
    part.truncate_to(16)
    assert part.leader_epochs() == ((1, 0), (3, 10))
    assert part.end_offset_for_epoch(3) == (3, 16)  # now the latest epoch: the log end
    part.append(sized_batch(500, 99), leader_epoch=5)
    assert part.leader_epochs() == ((1, 0), (3, 10), (5, 16))
    part.close()


def test_a_restart_empties_the_cache(tmp_path):
    part = filled(tmp_path / "p", EPOCHS)
    part.truncate_to(0)
    assert part.leader_epochs() == ()
    part.restart_at(50)
    assert part.leader_epochs() == ()
    part.close()


def test_delete_records_and_retention_trim_the_cache(tmp_path):
    part = filled(tmp_path / "p", EPOCHS)
    part.delete_records(12)
    assert part.leader_epochs() == ((3, 12), (4, 16))
    assert part.end_offset_for_epoch(1) == (1, 12)
    part.close()
    reopened = PartitionLog(tmp_path / "p", SMALL)  # the start is persisted: trimmed again
    assert reopened.log_start_offset == 12
    assert reopened.leader_epochs() == ((3, 12), (4, 16))
    reopened.close()
