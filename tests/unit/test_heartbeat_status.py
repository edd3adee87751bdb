"""The optional heartbeat "status" (a degraded service, e.g. a broker whose disk is full):
left out while healthy, so those frames stay as they were; carried and checked when set."""

import json

import pytest

from common.heartbeat import (
    STATUS_CHARS_MAX,
    TAG_BYTES,
    Heartbeat,
    HeartbeatSender,
    MalformedHeartbeatError,
    decode_heartbeat_body,
    decode_heartbeat_frame,
    encode_heartbeat,
)

SECRET = b"s"


def _body(heartbeat: Heartbeat) -> dict:
    return json.loads(encode_heartbeat(heartbeat, SECRET)[4 + TAG_BYTES:])


def test_healthy_frames_carry_no_status_field():
    assert "status" not in _body(Heartbeat("broker-1", "h:1:n", 1, 1.0, 1))


def test_status_round_trips():
    degraded = Heartbeat("broker-1", "h:1:n", 1, 1.0, 2, status="storage full on /data")
    frame = encode_heartbeat(degraded, SECRET)
    assert decode_heartbeat_frame(frame[4:], SECRET) == degraded


def test_a_receiver_without_status_reads_frames_from_before_it():
    old = b'{"name":"b","instance":"i","pid":1,"timestamp":1.0,"seq":1,"state":"alive"}'
    assert decode_heartbeat_body(old).status == ""


@pytest.mark.parametrize("status", [7, "x" * (STATUS_CHARS_MAX + 1)])
def test_bad_status_is_refused(status):
    fields = {"name": "b", "instance": "i", "pid": 1, "timestamp": 1.0, "seq": 1,
              "state": "alive", "status": status}
    with pytest.raises(MalformedHeartbeatError):
        decode_heartbeat_body(json.dumps(fields).encode())


def test_sender_asks_its_status_for_every_beat():
    statuses = iter(["", "storage full on /data"])
    sender = HeartbeatSender("broker-1", status=lambda: next(statuses), secret=SECRET)
    beats = [decode_heartbeat_frame(sender._next_frame("alive")[4:], SECRET) for _ in range(2)]
    assert [beat.status for beat in beats] == ["", "storage full on /data"]
