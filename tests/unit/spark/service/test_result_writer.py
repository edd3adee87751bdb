"""The deterministic parts of idempotent result writing: ids, order, slices; and the writer's
handling of batches an earlier run already stored (with a recording producer, no broker)."""

from __future__ import annotations

import threading

import pytest

from common.flights.session_records import QueryDone, ResultRows, decode
from common.kaska.errors import DuplicateSequenceError
from spark.service import result_writer
from spark.service.result_writer import (
    QueryResultWriter,
    ResultWriteInterruptedError,
    result_producer_id,
    slices_of,
    sorted_rows,
)


def test_producer_ids_are_stable_and_distinct_per_session_and_query():
    first = result_producer_id("c1", "q1")
    assert first == result_producer_id("c1", "q1")
    assert len({first, result_producer_id("c1", "q2"), result_producer_id("c2", "q1")}) == 3
    assert first.version == 5


def test_rows_sort_the_same_whatever_order_spark_returned():
    rows = [["b", "X-Y", "2.0"], ["a", "X-Y", "10.0"], ["a", "X-Y", "1.5"]]
    assert sorted_rows(rows) == sorted_rows(list(reversed(rows))) == [
        ["a", "X-Y", "1.5"], ["a", "X-Y", "10.0"], ["b", "X-Y", "2.0"]]


def test_slices_cover_every_row_once():
    rows = [[str(i)] for i in range(7)]
    assert list(slices_of([], 3)) == []
    assert [(first, len(chunk)) for first, chunk in slices_of(rows, 3)] == [(0, 3), (3, 3), (6, 1)]
    assert [(first, len(chunk)) for first, chunk in slices_of(rows[:6], 3)] == [(0, 3), (3, 3)]
    assert [row for _, chunk in slices_of(iter(rows), 3) for row in chunk] == rows


def test_slices_of_long_fields_end_early_and_the_same_way_every_time():
    rows = [["x" * 40, "y"], ["z"], ["w" * 50], ["v"], ["u"]]
    cut = [(first, len(chunk)) for first, chunk in slices_of(rows, 100, slice_text_bytes_max=45)]
    assert cut == [(0, 3), (3, 2)]  # 41 + 1 + 50 characters reach 45 at the third row
    assert cut == [(f, len(c)) for f, c in slices_of(iter(rows), 100, slice_text_bytes_max=45)]


def test_the_writer_takes_rows_from_an_iterator_one_slice_at_a_time(recording):
    pulled = []

    def rows():
        for i in range(5):
            pulled.append(i)
            yield [f"leg{i}", "A-B", "1.0"]

    sent_when_pulled = []
    with QueryResultWriter("h:1", "c1", "q2", rows_per_slice=2) as writer:
        original = recording[0].send_batch

        def send(*args, **kwargs):
            sent_when_pulled.append(len(pulled))
            return original(*args, **kwargs)

        recording[0].send_batch = send
        assert writer.write(rows(), {}) == 5
    # Each slice goes out as soon as it is full: never more than one slice held.
    assert sent_when_pulled == [2, 4, 5, 5]


class RecordingProducer:
    """Stands in for `Producer`: keeps (sequence, record); sequences in `stored` raise
    DuplicateSequenceError as the broker does for batches older than its window."""

    instances: list[RecordingProducer] = []

    def __init__(self, brokers, producer_id, **_options) -> None:
        self.producer_id = producer_id
        self.sent: list[tuple[int, object]] = []
        self.stored: set[int] = set()
        RecordingProducer.instances.append(self)

    def send_batch(self, topic, partition, payloads, sequence=None) -> int:
        assert (topic, partition, len(payloads)) == ("results.c1", 0, 1)
        if sequence in self.stored:
            raise DuplicateSequenceError("older than the window")
        self.sent.append((sequence, decode(payloads[0])))
        return len(self.sent) - 1

    def close(self) -> None:
        pass


@pytest.fixture
def recording(monkeypatch):
    RecordingProducer.instances = []
    monkeypatch.setattr(result_writer, "Producer", RecordingProducer)
    return RecordingProducer.instances


def test_writer_sends_slice_i_as_sequence_i_then_query_done(recording):
    rows = [[f"leg{i}", "A-B", "1.0", "X||Y||Z"] for i in range(5)]
    with QueryResultWriter("h:1", "c1", "q1", rows_per_slice=2) as writer:
        assert writer.write(rows, {"bad_fare": 2}) == 5
    (producer,) = recording
    assert producer.producer_id == result_producer_id("c1", "q1")
    assert producer.sent == [
        (0, ResultRows("q1", 0, rows[0:2])), (1, ResultRows("q1", 2, rows[2:4])),
        (2, ResultRows("q1", 4, rows[4:5])), (3, QueryDone("q1", 5, {"bad_fare": 2}))]


def test_batches_an_earlier_run_stored_count_as_written(recording):
    rows = [[f"r{i}", "1.0", "2.0"] for i in range(4)]
    writer = QueryResultWriter("h:1", "c1", "q4", rows_per_slice=1)
    recording[0].stored = {0, 1}
    writer.write(rows, {})
    assert writer.old_duplicates == 2
    assert [sequence for sequence, _ in recording[0].sent] == [2, 3, 4]


def test_a_stop_interrupts_between_slices(recording):
    stop = threading.Event()
    stop.set()
    writer = QueryResultWriter("h:1", "c1", "q2", rows_per_slice=1, stop=stop)
    with pytest.raises(ResultWriteInterruptedError):
        writer.write([["a", "b", "1.0"]], {})
    assert recording[0].sent == []
