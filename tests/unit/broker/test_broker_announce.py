"""The broker's readiness line reaches its log in one write, newline included: the launcher
(scripts/launcher/brokers.py) recognises it only whole, and the broker's threads log into the
same file."""

from __future__ import annotations

import io

from scripts.launcher.brokers import listening_line
from services.broker.__main__ import announce


class _RecordingRaw(io.RawIOBase):
    """An unbuffered file that keeps every write call apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.writes.append(bytes(data))
        return len(data)


def _unbuffered_stdout(raw: _RecordingRaw) -> io.TextIOWrapper:
    """stdout as PYTHONUNBUFFERED makes it: every text write goes straight to the file."""
    return io.TextIOWrapper(raw, encoding="utf-8", write_through=True)


def test_print_would_write_the_line_and_its_newline_apart():
    """Why announce exists: another thread's log line can land between these two writes."""
    raw = _RecordingRaw()
    print("kaska broker 1 listening on 127.0.0.1:53767", file=_unbuffered_stdout(raw),
          flush=True)
    assert raw.writes == [b"kaska broker 1 listening on 127.0.0.1:53767", b"\n"]


def test_announce_writes_the_whole_line_at_once():
    raw = _RecordingRaw()
    announce("kaska broker 1 listening on 127.0.0.1:53767", _unbuffered_stdout(raw))
    assert raw.writes == [b"kaska broker 1 listening on 127.0.0.1:53767\n"]
    assert listening_line(1).search(raw.writes[0].decode())
