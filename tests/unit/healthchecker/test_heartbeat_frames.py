"""Heartbeat frame codec (common/heartbeat.py) and probe / target parsing."""

import json
import struct

import pytest

from common.heartbeat import (
    FRAME_BYTES_MAX,
    STATE_STOPPING,
    Heartbeat,
    MalformedHeartbeatError,
    decode_heartbeat_body,
    encode_heartbeat,
    frame_length,
    parse_target,
    parse_targets,
)
from healthchecker.monitor import Probe, parse_probe


def test_round_trip():
    heartbeat = Heartbeat("broker-1", "host:42", 42, 1700000000.5, 7, STATE_STOPPING)
    frame = encode_heartbeat(heartbeat)
    assert frame_length(frame[:4]) == len(frame) - 4
    assert decode_heartbeat_body(frame[4:]) == heartbeat


@pytest.mark.parametrize("length", [0, FRAME_BYTES_MAX + 1, 2**32 - 1])
def test_frame_length_bounds(length):
    with pytest.raises(MalformedHeartbeatError):
        frame_length(struct.pack(">I", length))


def _body(**overrides) -> bytes:
    fields = {"name": "a", "instance": "h:1", "pid": 1, "timestamp": 1.0, "seq": 1,
              "state": "alive", **overrides}
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"\xff",
        b"[]",
        _body(name=""),
        _body(name="x" * 129),
        _body(name=5),
        _body(state="zombie"),
        _body(pid="1"),
        _body(timestamp=None),
    ],
)
def test_malformed_bodies(body):
    with pytest.raises(MalformedHeartbeatError):
        decode_heartbeat_body(body)


def test_parse_target_and_probe():
    assert parse_target("broker-1:9092") == ("broker-1", 9092)
    assert parse_targets(" a:1, b:2,") == [("a", 1), ("b", 2)] and parse_targets("") == []
    assert parse_probe("spark-master=spark:7077") == Probe("spark-master", "spark", 7077)
    for bad in ("nohost", ":80", "host:", "host:x"):
        with pytest.raises(ValueError):
            parse_target(bad)
    for bad in ("spark:7077", "=h:1", "s=h", "s=h:p"):
        with pytest.raises(ValueError):
            parse_probe(bad)
