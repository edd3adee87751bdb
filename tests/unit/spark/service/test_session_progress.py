"""What the query service may commit on `sessions` while sessions finish out of order."""

from spark.service.session_progress import SessionProgress


def test_commit_position_waits_for_the_oldest_unfinished_session():
    progress = SessionProgress()
    progress.start(0, 10)
    assert progress.commit_position(0) == 10
    for offset in (10, 11, 12):
        progress.picked(0, offset)
    assert (progress.pending(), progress.commit_position(0)) == (3, 10)
    progress.finished(0, 12)
    progress.finished(0, 10)
    assert progress.commit_position(0) == 11
    progress.finished(0, 11)
    assert (progress.pending(), progress.commit_position(0)) == (0, 13)


def test_partitions_are_independent():
    progress = SessionProgress()
    progress.start(0, 0)
    progress.start(1, 5)
    progress.picked(1, 5)
    progress.picked(0, 0)
    progress.finished(0, 0)
    assert (progress.commit_position(0), progress.commit_position(1)) == (1, 5)
    assert progress.partitions() == [0, 1]
    assert progress.is_pending(1, 5) and not progress.is_pending(0, 0)


def test_skipping_deleted_records_moves_the_position_but_keeps_pending_ones():
    progress = SessionProgress()
    progress.start(0, 3)
    progress.picked(0, 3)
    progress.skip_to(0, 9)
    assert progress.commit_position(0) == 3
    progress.finished(0, 3)
    assert progress.commit_position(0) == 9
    progress.skip_to(0, 4)  # never backwards
    assert progress.commit_position(0) == 9
