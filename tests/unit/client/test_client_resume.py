"""The resume checkpoint: round trip through the checkpoint store, mismatches refused."""

import logging

import pytest

from client.resume import (
    CorruptResumeStateError,
    FileProgress,
    ResumeMismatchError,
    ResumeState,
    SessionCheckpoint,
)
from common.checkpoint import CheckpointTooLargeError
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


# A checkpoint as a format-1 client wrote it, for a fresh session: what a newer client must
# keep reading, and what a fresh session starts from (no message acknowledged yet).
FORMAT_1_FRESH = {
    "format": 1,
    "client_id": CID,
    "partitions": 4,
    "batch_rows": 300,
    "files": {
        "airports": {"bytes": 10, "messages_acked": 0, "rows_sent": None, "rows_rejected": None},
        "flights": {"bytes": 1000, "messages_acked": 0, "rows_sent": None, "rows_rejected": None},
    },
    "session_started": False,
    "session_ended": None,
    "results_saved": False,
    "results_acked": False,
}


def test_a_fresh_session_is_saved_as_format_1_with_no_message_acknowledged():
    assert fresh().to_json() == FORMAT_1_FRESH


def test_a_format_1_checkpoint_loads(tmp_path):
    SessionCheckpoint(tmp_path, CID).store.save_json(FORMAT_1_FRESH)
    loaded = SessionCheckpoint(tmp_path, CID).load_or(fresh())
    assert loaded.resumed
    assert loaded == fresh()


def test_a_checkpoint_the_store_refuses_is_logged_and_the_session_goes_on(tmp_path, caplog):
    checkpoint = SessionCheckpoint(tmp_path, CID)
    assert checkpoint.save_quietly(fresh()) is True
    state = fresh()
    state.files["flights"].messages_acked = 7

    def refuse(_value):
        raise CheckpointTooLargeError("checkpoint of 2 MiB exceeds 1 MiB")

    checkpoint.store.save_json = refuse
    with caplog.at_level(logging.ERROR, logger="client.resume"):
        assert checkpoint.save_quietly(state) is False
    assert "exceeds 1 MiB" in caplog.text
    assert checkpoint.load_or(fresh()).files["flights"].messages_acked == 0, "the last good one"
