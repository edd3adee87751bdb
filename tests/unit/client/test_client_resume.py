"""The resume checkpoint: round trip through the checkpoint store, mismatches refused."""

import pytest

from client.resume import (
    CorruptResumeStateError,
    FileProgress,
    ResumeMismatchError,
    ResumeState,
    SessionCheckpoint,
)
from common.flights.session_records import SessionEnded

CID = "5f0c7f0e-8a4e-4a57-9d0e-2f3a1c9b7e11"


def fresh(partitions=4, batch_rows=300, flights_bytes=1000):
    return ResumeState(CID, partitions, batch_rows,
                       {"airports": FileProgress(10), "flights": FileProgress(flights_bytes)})


def test_no_checkpoint_gives_the_fresh_state(tmp_path):
    state = SessionCheckpoint(tmp_path, CID).load_or(fresh())
    assert state == fresh() and not state.resumed


def test_saved_progress_comes_back(tmp_path):
    state = fresh()
    state.session_started = True
    state.files["airports"] = FileProgress(10, 3, rows_sent=900, rows_rejected={"x": 1})
    state.files["flights"].messages_acked = 7
    state.session_ended = SessionEnded(CID, {"flights.c": [1, 2]}, {"flights": 5}, {"x": 1})
    SessionCheckpoint(tmp_path, CID).save(state)
    loaded = SessionCheckpoint(tmp_path, CID).load_or(fresh())
    assert loaded == state and loaded.resumed
    assert loaded.file_done("airports") and not loaded.file_done("flights")


@pytest.mark.parametrize("other", [fresh(partitions=2), fresh(batch_rows=100),
                                   fresh(flights_bytes=999)])
def test_other_settings_or_files_are_refused(tmp_path, other):
    SessionCheckpoint(tmp_path, CID).save(fresh())
    with pytest.raises(ResumeMismatchError):
        SessionCheckpoint(tmp_path, CID).load_or(other)


def test_checkpoints_of_other_clients_are_separate(tmp_path):
    SessionCheckpoint(tmp_path, CID).save(fresh())
    other = "0b5a2c64-4a0e-4a8b-8d55-6a1c2e7f9a10"
    assert SessionCheckpoint(tmp_path, other).store.load() is None


def test_corrupt_json_fields_raise_a_named_error():
    with pytest.raises(CorruptResumeStateError):
        ResumeState.from_json({"format": 1, "client_id": CID})
    with pytest.raises(CorruptResumeStateError):
        ResumeState.from_json({**fresh().to_json(), "format": 99})


def test_results_saved_and_acked_come_back(tmp_path):
    state = fresh()
    state.results_saved = True
    SessionCheckpoint(tmp_path, CID).save(state)
    loaded = SessionCheckpoint(tmp_path, CID).load_or(fresh())
    assert (loaded.results_saved, loaded.results_acked) == (True, False)
    loaded.results_acked = True
    SessionCheckpoint(tmp_path, CID).save(loaded)
    assert SessionCheckpoint(tmp_path, CID).load_or(fresh()).results_acked


def test_a_checkpoint_from_before_the_ack_loads_as_not_saved():
    old = fresh().to_json()
    del old["results_saved"], old["results_acked"]
    loaded = ResumeState.from_json(old)
    assert (loaded.results_saved, loaded.results_acked) == (False, False)


def test_a_non_boolean_flag_is_corrupt():
    with pytest.raises(CorruptResumeStateError):
        ResumeState.from_json({**fresh().to_json(), "results_saved": "yes"})
