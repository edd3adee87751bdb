"""The result writer waits out a broker whose disk is full (KaskaStorageError, retriable)
instead of failing the session's job: the same slice, with the same sequence, is sent again
until the broker takes it, the wait bound passes, or the service stops."""

from __future__ import annotations

import threading

import pytest

from common.kaska.errors import KaskaStorageError
from spark.service import result_writer
from spark.service.result_writer import QueryResultWriter, ResultWriteInterruptedError


class InstantStop(threading.Event):
    """An event whose wait returns at once (without being set): no real sleeping in tests."""

    def wait(self, timeout=None):
        return self.is_set()


class FullDiskProducer:
    """Stands in for `Producer`: refuses the first `refusals` sends as a full broker would."""

    refusals = 0
    instances: list[FullDiskProducer] = []

    def __init__(self, brokers, producer_id, **_options) -> None:
        self.sequences: list[int] = []
        self.stored: list[int] = []
        FullDiskProducer.instances.append(self)

    def send_batch(self, topic, partition, payloads, sequence=None) -> int:
        self.sequences.append(sequence)
        if FullDiskProducer.refusals:
            FullDiskProducer.refusals -= 1
            raise KaskaStorageError("storage full on /data")
        self.stored.append(sequence)
        return len(self.stored) - 1

    def close(self) -> None:
        pass


@pytest.fixture
def full_broker(monkeypatch):
    FullDiskProducer.instances = []
    monkeypatch.setattr(result_writer, "Producer", FullDiskProducer)
    return FullDiskProducer


def test_storage_full_is_waited_out_with_the_same_sequence(full_broker):
    full_broker.refusals = 3
    writer = QueryResultWriter("h:1", "c1", "q1", rows_per_slice=1, stop=InstantStop())
    assert writer.write([["a", "1.0"]], {}) == 1
    (producer,) = full_broker.instances
    assert producer.sequences == [0, 0, 0, 0, 1]
    assert producer.stored == [0, 1]


def test_storage_full_past_the_wait_bound_fails_the_attempt(full_broker):
    full_broker.refusals = 100
    now = [0.0]

    def clock():
        now[0] += 30.0
        return now[0]

    writer = QueryResultWriter("h:1", "c1", "q1", stop=InstantStop(),
                               storage_full_wait_s_max=100.0, clock=clock)
    with pytest.raises(KaskaStorageError):
        writer.write([["a", "1.0"]], {})
    assert len(full_broker.instances[0].sequences) == 5  # 0, 30, 60, 90 s waited; 120 s: out


def test_a_stop_ends_the_wait(full_broker):
    full_broker.refusals = 100
    stop = threading.Event()

    class StopOnWait(InstantStop):
        def wait(self, timeout=None):
            stop.set()
            return True

    writer = QueryResultWriter("h:1", "c1", "q1", stop=StopOnWait())
    with pytest.raises(ResultWriteInterruptedError):
        writer.write([["a", "1.0"]], {})
