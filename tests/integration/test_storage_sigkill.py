"""SIGKILL a process appending to a PartitionLog at random moments, reopen, and check that
every acknowledged batch is there exactly once (storage only; the broker-level crash test
lives with the server)."""

import os
import random
import signal
import time
from dataclasses import replace

import pytest

from common.kaska.record_batch import encode_batch, iter_batches, iter_records
from services.broker.storage.config import LogConfig
from services.broker.storage.partition import PartitionLog

CYCLES = 20
PRODUCER = bytes(range(16))
CONFIG = replace(LogConfig(), segment_bytes_max=64 * 1024, batch_bytes_max=8 * 1024)



def append_forever(directory, next_sequence: int, out_fd: int) -> None:
    """The child: append idempotent batches, writing one line per acknowledged append."""
    part = PartitionLog(directory, CONFIG)
    os.write(out_fd, b"ready\n")
    for sequence in range(next_sequence, next_sequence + 1_000_000):
        values = [b"%d/%d" % (sequence, i) + b"." * (sequence % 97) for i in range(3)]
        data = encode_batch(values, producer_id=PRODUCER, sequence=sequence, timestamp_ms=0)

        def fill(region, data=data):
            half = len(data) // 2  # two steps, like a socket delivering a batch in pieces
            region[:half] = data[:half]
            region[half:] = data[half:]

        result = part.append_from(len(data), fill)
        os.write(out_fd, b"%d %d\n" % (sequence, result.base_offset))


def run_until_killed(directory, next_sequence, rng) -> list[tuple[int, int]]:
    """(sequence, base offset) of every append the child acknowledged before its SIGKILL."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        os.close(read_fd)
        try:
            append_forever(directory, next_sequence, write_fd)
        finally:
            os._exit(1)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as lines:
        assert lines.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.02))  # a random moment in the append loop
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        # It was still in its endless append loop: the kill is what ended it.
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        out = lines.read()
    acked = []
    for line in out.split(b"\n"):
        fields = line.split()
        if len(fields) == 2:  # a line cut by the kill was never an acknowledgement
            acked.append((int(fields[0]), int(fields[1])))
    return acked


@pytest.mark.integration
def test_every_acknowledged_batch_survives_sigkill_exactly_once(tmp_path):
    rng = random.Random(7)
    directory = tmp_path / "p"
    acknowledged: dict[int, int] = {}
    next_sequence = 0
    for _ in range(CYCLES):
        for sequence, base_offset in run_until_killed(directory, next_sequence, rng):
            assert acknowledged.setdefault(sequence, base_offset) == base_offset
            next_sequence = max(next_sequence, sequence + 1)
        part = PartitionLog(directory, CONFIG)
        try:
            batches = list(iter_batches(part.read_bytes(0, 10**9)))
            stored = [(header.sequence, header.base_offset) for header, _ in batches]
            record_count = sum(len(list(iter_records(view, header))) for header, view in batches)
        finally:
            part.close()
        sequences = [sequence for sequence, _ in stored]
        assert sequences == list(range(len(sequences)))  # once each, in order, no gaps
        assert set(acknowledged.items()) <= set(stored)
        assert record_count == 3 * len(stored)
    assert next_sequence > CYCLES  # the children did get work done between kills
