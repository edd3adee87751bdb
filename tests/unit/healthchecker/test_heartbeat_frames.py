"""Heartbeat frame codec (common/heartbeat.py): signed frames, forgeries, bounds; probe and
target parsing."""

import json
import struct

import pytest

from common.address import parse_host_port, parse_host_ports
from common.cluster_secret import SECRET_ENV, ClusterSecretError
from common.heartbeat import (
    FRAME_BYTES_MAX,
    STATE_STOPPING,
    Heartbeat,
    HeartbeatConfigError,
    HeartbeatSender,
    MalformedHeartbeatError,
    UnauthenticatedHeartbeatError,
    decode_heartbeat_body,
    decode_heartbeat_frame,
    encode_heartbeat,
    frame_length,
    heartbeat_secret,
)
from healthchecker.monitor import Probe, parse_probe

SECRET = b"cluster-secret"


def test_round_trip():
    heartbeat = Heartbeat("broker-1", "host:42", 42, 1700000000.5, 7, STATE_STOPPING,
                          incarnation=123)
    frame = encode_heartbeat(heartbeat, SECRET)
    assert frame_length(frame[:4]) == len(frame) - 4
    assert decode_heartbeat_frame(frame[4:], SECRET) == heartbeat


def test_forged_unsigned_and_truncated_frames_are_unauthenticated():
    frame = encode_heartbeat(Heartbeat("broker-1", "host:42", 42, 1.5, 7), SECRET)[4:]
    tampered = frame.replace(b"broker-1", b"broker-2")
    for bad in (tampered, frame[:-1], frame[:31], frame[32:],
                encode_heartbeat(Heartbeat("broker-1", "host:42", 42, 1.5, 7), b"other")[4:]):
        with pytest.raises(UnauthenticatedHeartbeatError):
            decode_heartbeat_frame(bad, SECRET)


def test_a_sender_with_targets_needs_the_secret(tmp_path, monkeypatch):
    with pytest.raises(HeartbeatConfigError):
        HeartbeatSender("svc", targets=[("127.0.0.1", 1)])
    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert heartbeat_secret([], None) is None
    with pytest.raises(HeartbeatConfigError):
        heartbeat_secret([("127.0.0.1", 1)], None)
    monkeypatch.setenv(SECRET_ENV, " from-env\n")
    assert heartbeat_secret([("127.0.0.1", 1)], None) == b"from-env"
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(b"from-file\n")
    assert heartbeat_secret([("127.0.0.1", 1)], secret_file) == b"from-file"
    with pytest.raises(ClusterSecretError):
        heartbeat_secret([("127.0.0.1", 1)], tmp_path / "missing")


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
        _body(inc=-1),
        _body(inc=2**64),
        _body(inc="7"),
        _body(seq=-1),
        _body(timestamp=float("inf")),
    ],
)
def test_malformed_bodies(body):
    with pytest.raises(MalformedHeartbeatError):
        decode_heartbeat_body(body)


def test_parse_target_and_probe():
    assert parse_host_port("broker-1:9092") == ("broker-1", 9092)
    assert parse_host_ports(" a:1, b:2,") == (("a", 1), ("b", 2)) and parse_host_ports("") == ()
    assert parse_probe("spark-master=spark:7077") == Probe("spark-master", "spark", 7077)
    for bad in ("nohost", ":80", "host:", "host:x"):
        with pytest.raises(ValueError):
            parse_host_port(bad)
    for bad in ("spark:7077", "=h:1", "s=h", "s=h:p"):
        with pytest.raises(ValueError):
            parse_probe(bad)
