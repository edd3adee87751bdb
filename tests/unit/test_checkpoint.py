"""Checkpoint store: round trips, versions, torn and corrupt files, a crash between every step."""

import os

import pytest

from common.checkpoint import (
    HEADER_BYTES,
    CheckpointStore,
    CheckpointTooLargeError,
    CorruptCheckpointError,
    NoValidCheckpointError,
    decode_checkpoint,
    encode_checkpoint,
)


def _store(tmp_path, **kwargs) -> CheckpointStore:
    return CheckpointStore(tmp_path / "ckpt", name="state", **kwargs)


def test_empty_store_loads_none(tmp_path):
    assert _store(tmp_path).load() is None


def test_save_then_load_round_trips_bytes_and_json(tmp_path):
    store = _store(tmp_path)
    assert store.save(b"\x00raw\xff") == 1
    assert store.load().payload == b"\x00raw\xff"
    assert store.save_json({"restarts": {"broker-1": 2}}) == 2
    reopened = _store(tmp_path)
    assert reopened.load_json() == {"restarts": {"broker-1": 2}}
    assert reopened.load().version == 2


def test_versions_continue_across_store_instances(tmp_path):
    _store(tmp_path).save(b"a")
    _store(tmp_path).save(b"b")
    third = _store(tmp_path)
    assert third.save(b"c") == 3
    assert decode_checkpoint(third.old_path.read_bytes()).payload == b"b"


def test_decode_rejects_every_single_byte_flip():
    data = encode_checkpoint(7, b"payload")
    for index in range(len(data)):
        flipped = bytearray(data)
        flipped[index] ^= 0x01
        with pytest.raises(CorruptCheckpointError):
            decode_checkpoint(bytes(flipped))


def test_decode_rejects_truncation_and_trailing_bytes():
    data = encode_checkpoint(3, b"0123456789")
    for length in (0, HEADER_BYTES - 1, HEADER_BYTES, len(data) - 1):
        with pytest.raises(CorruptCheckpointError):
            decode_checkpoint(data[:length])
    with pytest.raises(CorruptCheckpointError):
        decode_checkpoint(data + b"x")


def test_torn_current_falls_back_to_old(tmp_path):
    store = _store(tmp_path)
    store.save(b"first")
    store.save(b"second")
    data = store.current_path.read_bytes()
    store.current_path.write_bytes(data[: len(data) - 3])
    restored = _store(tmp_path).load()
    assert (restored.version, restored.payload) == (1, b"first")


def test_corrupt_current_and_old_raise_named_error(tmp_path):
    store = _store(tmp_path)
    store.save(b"first")
    store.save(b"second")
    store.current_path.write_bytes(b"garbage")
    store.old_path.write_bytes(b"")
    with pytest.raises(NoValidCheckpointError):
        _store(tmp_path).load()


def test_newest_valid_wins_even_if_old_is_newer(tmp_path):
    store = _store(tmp_path)
    store.directory.mkdir(parents=True)
    store.current_path.write_bytes(encode_checkpoint(4, b"four"))
    store.old_path.write_bytes(encode_checkpoint(9, b"nine"))
    assert store.load().payload == b"nine"
    assert store.save(b"ten") == 10


def test_save_over_corrupt_current_keeps_valid_old(tmp_path):
    store = _store(tmp_path)
    store.save(b"first")
    store.save(b"second")
    store.current_path.write_bytes(b"torn")
    reopened = _store(tmp_path)
    assert reopened.save(b"third") == 2  # version after the newest *valid* one (OLD = 1)
    assert decode_checkpoint(reopened.old_path.read_bytes()).payload == b"first"
    assert reopened.load().payload == b"third"


def test_payload_bound_is_enforced(tmp_path):
    store = _store(tmp_path, payload_bytes_max=8)
    with pytest.raises(CheckpointTooLargeError):
        store.save(b"123456789")
    assert store.load() is None


# A save is: (1) write+fsync TMP, (2) rename CURRENT -> OLD, (3) rename TMP -> CURRENT,
# (4) fsync the directory. Each case leaves the files as a crash right after a step would.


def _prepare_two_saves(tmp_path) -> CheckpointStore:
    store = _store(tmp_path)
    store.save(b"v1")
    store.save(b"v2")
    return store


def test_crash_while_writing_tmp_keeps_current(tmp_path):
    store = _prepare_two_saves(tmp_path)
    store.tmp_path.write_bytes(encode_checkpoint(3, b"v3")[:10])
    assert _store(tmp_path).load().payload == b"v2"


def test_crash_after_tmp_written_keeps_current(tmp_path):
    store = _prepare_two_saves(tmp_path)
    store.tmp_path.write_bytes(encode_checkpoint(3, b"v3"))
    assert _store(tmp_path).load().payload == b"v2"


def test_crash_after_current_renamed_to_old_restores_old(tmp_path):
    store = _prepare_two_saves(tmp_path)
    store.tmp_path.write_bytes(encode_checkpoint(3, b"v3"))
    os.replace(store.current_path, store.old_path)
    restored = _store(tmp_path)
    assert restored.load().payload == b"v2"
    assert restored.save(b"v3-again") == 3
    assert restored.load().payload == b"v3-again"


def test_crash_after_tmp_renamed_to_current_restores_new(tmp_path):
    store = _prepare_two_saves(tmp_path)
    store.tmp_path.write_bytes(encode_checkpoint(3, b"v3"))
    os.replace(store.current_path, store.old_path)
    os.replace(store.tmp_path, store.current_path)
    assert _store(tmp_path).load().payload == b"v3"


def test_crash_during_first_save_means_no_checkpoint(tmp_path):
    store = _store(tmp_path)
    store.directory.mkdir(parents=True)
    store.tmp_path.write_bytes(encode_checkpoint(1, b"v1"))
    assert store.load() is None
