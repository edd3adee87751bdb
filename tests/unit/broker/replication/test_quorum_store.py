"""QuorumStore and CommitStore: defaults, round trips, fallback and monotonic commits."""

import pytest

from common.checkpoint import CheckpointStore, CorruptCheckpointError, NoValidCheckpointError
from services.broker.replication.quorum_store import (
    COMMIT_NAME,
    QUORUM_NAME,
    CommitStore,
    QuorumState,
    QuorumStore,
)


def test_quorum_defaults_when_nothing_was_saved(tmp_path):
    assert QuorumStore(tmp_path / "missing").load() == QuorumState(0, None)


def test_quorum_round_trip_across_instances(tmp_path):
    QuorumStore(tmp_path).save(QuorumState(4, 2))
    assert QuorumStore(tmp_path).load() == QuorumState(4, 2)
    QuorumStore(tmp_path).save(QuorumState(5, None))
    assert QuorumStore(tmp_path).load() == QuorumState(5, None)


def test_quorum_torn_current_falls_back_to_old(tmp_path):
    store = QuorumStore(tmp_path)
    store.save(QuorumState(1, 1))
    store.save(QuorumState(2, 3))
    current = tmp_path / f"{QUORUM_NAME}.current"
    current.write_bytes(current.read_bytes()[:-3])
    assert QuorumStore(tmp_path).load() == QuorumState(1, 1)


def test_quorum_with_no_valid_file_refuses(tmp_path):
    QuorumStore(tmp_path).save(QuorumState(1, 1))
    (tmp_path / f"{QUORUM_NAME}.current").write_bytes(b"garbage")
    with pytest.raises(NoValidCheckpointError):
        QuorumStore(tmp_path).load()


@pytest.mark.parametrize("payload", [
    b"[1, 2]", b'{"epoch": -1, "voted_for": null}', b'{"epoch": true, "voted_for": null}',
    b'{"epoch": 1, "voted_for": "x"}', b"not json", b"\xff\xfe",
])
def test_quorum_payload_that_is_no_state_is_refused(tmp_path, payload):
    CheckpointStore(tmp_path, QUORUM_NAME).save(payload)
    with pytest.raises(CorruptCheckpointError):
        QuorumStore(tmp_path).load()


def test_quorum_refuses_to_save_nonsense(tmp_path):
    with pytest.raises(ValueError):
        QuorumStore(tmp_path).save(QuorumState(-1, None))


def test_commit_defaults_to_zero_and_round_trips(tmp_path):
    assert CommitStore(tmp_path).load() == 0
    CommitStore(tmp_path).save(17)
    assert CommitStore(tmp_path).load() == 17


def test_commit_never_goes_back(tmp_path):
    store = CommitStore(tmp_path)
    store.save(10)
    store.save(4)
    store.save(10)
    assert CommitStore(tmp_path).load() == 10
    later = CommitStore(tmp_path)  # a fresh instance knows the saved value too
    later.save(9)
    assert CommitStore(tmp_path).load() == 10
    later.save(11)
    assert CommitStore(tmp_path).load() == 11


def test_commit_saves_are_skipped_when_nothing_grows(tmp_path):
    store = CommitStore(tmp_path)
    store.save(3)
    version = CheckpointStore(tmp_path, COMMIT_NAME).load().version
    store.save(3)
    store.save(2)
    assert CheckpointStore(tmp_path, COMMIT_NAME).load().version == version


def test_commit_unreadable_starts_from_zero_and_recovers(tmp_path):
    CommitStore(tmp_path).save(5)
    (tmp_path / f"{COMMIT_NAME}.current").write_bytes(b"garbage")
    store = CommitStore(tmp_path)
    assert store.load() == 0
    store.save(2)
    assert CommitStore(tmp_path).load() == 2


@pytest.mark.parametrize("payload", [b'{"commit": -3}', b'{"commit": "7"}', b"nope"])
def test_commit_payload_that_is_no_commit_reads_as_zero(tmp_path, payload):
    CheckpointStore(tmp_path, COMMIT_NAME).save(payload)
    assert CommitStore(tmp_path).load() == 0


def test_commit_refuses_to_save_nonsense(tmp_path):
    with pytest.raises(ValueError):
        CommitStore(tmp_path).save(-1)
