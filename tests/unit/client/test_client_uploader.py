"""FileUploader against a fake producer: placement, resume skip, duplicates, retries, stop,
partitions sent in parallel with the acknowledged prefix reported in order."""

import threading

import pytest

from client.csv_reader import FLIGHTS_DIALECT, CsvSliceReader
from client.message_ids import place
from client.uploader import (
    AckedPrefix,
    FileUploader,
    UploadConfigError,
    UploadInterruptedError,
    UploadPacer,
    UploadSettings,
)
from common.flights.arrow_rows import decode_rows
from common.kaska.errors import (
    ConnectionLostError,
    DuplicateSequenceError,
    MessageTooLargeError,
)
from common.kaska.patience import BrokerRefusedError


class FakeProducer:
    """Records every send; `failures` maps a call number to the error raised by that call."""

    def __init__(self, failures=None):
        self.sent = []
        self.calls = 0
        self.failures = failures or {}
        self.lock = threading.Lock()  # the uploader's senders call from several threads

    def send_batch(self, topic, partition, payloads, sequence=None):
        with self.lock:
            self.calls += 1
            error = self.failures.get(self.calls)
            if error is not None:
                raise error
            self.sent.append((topic, partition, sequence, payloads[0]))
        return 0

    def in_message_order(self, partitions=3):
        return sorted(self.sent, key=lambda sent: sent[2] * partitions + sent[1])


def reader_of(tmp_path, rows=23, batch_rows=5):
    path = tmp_path / "f.csv"
    path.write_text("n,sq\n" + "".join(f"{i},{i * i}\n" for i in range(rows)))
    return CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=batch_rows)


def upload(producer, reader, messages_acked=0, stop=None, partitions=3):
    acks = []
    uploader = FileUploader(producer, "flights.cid", partitions, stop or threading.Event(),
                            UploadSettings(stall_timeout_s=5.0))
    result = uploader.upload(reader, messages_acked, lambda n, rows: acks.append((n, rows)))
    return result, acks


def test_every_slice_goes_to_its_partition_and_sequence(tmp_path):
    producer = FakeProducer()
    result, acks = upload(producer, reader_of(tmp_path))
    assert result.messages == 5 and result.rows == 23
    assert [(p, s) for _, p, s, _ in producer.in_message_order()] == [
        (place(m, 3).partition, place(m, 3).sequence) for m in range(5)]
    decoded = [decode_rows(payload).to_pydict() for *_, payload in producer.in_message_order()]
    assert decoded[4] == {"n": ["20", "21", "22"], "sq": ["400", "441", "484"],
                          "row_id": [20, 21, 22]}
    assert acks == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 3)]
    assert result.payload_bytes == sum(len(payload) for *_, payload in producer.sent)


def test_resume_skips_the_acknowledged_prefix_and_counts_its_rows(tmp_path):
    producer = FakeProducer()
    result, acks = upload(producer, reader_of(tmp_path), messages_acked=3)
    sent = producer.in_message_order()
    assert [s for _, _, s, _ in sent] == [place(3, 3).sequence, place(4, 3).sequence]
    assert [decode_rows(p).column("row_id").to_pylist()[0] for *_, p in sent] == [15, 20]
    assert result.rows == 23 and [n for n, _ in acks] == [1, 2, 3, 4, 5]
    assert result.messages_skipped == 3 and result.messages_sent == 2


def test_duplicate_sequence_means_already_stored(tmp_path):
    producer = FakeProducer({1: DuplicateSequenceError("older than remembered")})
    result, _ = upload(producer, reader_of(tmp_path))
    assert result.messages_sent == 5 and result.messages == 5
    assert len(producer.sent) == 4


def test_a_lost_connection_resends_the_same_message(tmp_path):
    producer = FakeProducer({2: ConnectionLostError("gone")})
    result, _ = upload(producer, reader_of(tmp_path))
    assert sorted((p, s) for _, p, s, _ in producer.sent) == sorted(
        (place(m, 3).partition, place(m, 3).sequence) for m in range(5))
    assert producer.calls == 6 and result.messages == 5


def test_a_refused_message_fails_the_upload(tmp_path):
    producer = FakeProducer({1: MessageTooLargeError("too big")})
    with pytest.raises(BrokerRefusedError, match="MessageTooLargeError"):
        upload(producer, reader_of(tmp_path))


def test_stop_interrupts_between_messages(tmp_path):
    stop = threading.Event()
    producer = FakeProducer()
    original = producer.send_batch

    def send_then_stop(*args, **kwargs):
        stop.set()
        return original(*args, **kwargs)

    producer.send_batch = send_then_stop
    with pytest.raises(UploadInterruptedError):
        upload(producer, reader_of(tmp_path), stop=stop)
    # Three senders: each may have started a message before the first one set the stop.
    assert 1 <= len(producer.sent) <= 3


def test_partitions_are_sent_in_parallel_each_in_sequence_order(tmp_path):
    """Partition 0's first message is held until partition 1 has sent one: with one message
    in flight at a time this upload could never end."""
    producer = FakeProducer()
    partition_1_sent = threading.Event()
    original = producer.send_batch

    def send(topic, partition, payloads, sequence=None):
        if partition == 0 and sequence == 0:
            assert partition_1_sent.wait(5.0), "partition 1 waited for partition 0"
        result = original(topic, partition, payloads, sequence)
        if partition == 1:
            partition_1_sent.set()
        return result

    producer.send_batch = send
    result, acks = upload(producer, reader_of(tmp_path, rows=60), partitions=3)
    assert result.messages == 12 and result.rows == 60
    for partition in range(3):
        sequences = [s for _, p, s, _ in producer.sent if p == partition]
        assert sequences == list(range(4)), f"partition {partition} out of order"
    assert [n for n, _ in acks] == list(range(1, 13)), "the prefix grows one message at a time"


def test_a_failure_on_one_partition_ends_the_upload(tmp_path):
    producer = FakeProducer()
    original = producer.send_batch

    def send(topic, partition, payloads, sequence=None):
        if partition == 2:
            raise MessageTooLargeError("too big")
        return original(topic, partition, payloads, sequence)

    producer.send_batch = send
    with pytest.raises(BrokerRefusedError, match="MessageTooLargeError"):
        upload(producer, reader_of(tmp_path, rows=60), partitions=3)
    assert all(p != 2 for _, p, _, _ in producer.sent)


def test_acked_prefix_grows_only_over_contiguous_acknowledgements():
    prefix = AckedPrefix(0)
    assert prefix.add(2, 30) == [] and prefix.add(1, 20) == []
    assert prefix.add(0, 10) == [(1, 10), (2, 20), (3, 30)]
    assert prefix.add(4, 50) == [] and prefix.end == 3
    assert prefix.add(3, 40) == [(4, 40), (5, 50)]


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_pacer_holds_rows_back_to_the_ceiling_and_never_waits_without_one():
    clock = FakeClock()
    pacer = UploadPacer(rows_per_s_max=1000.0, clock=clock)
    assert pacer.delay_s(500) == 0.0  # the first rows go at once
    assert pacer.delay_s(500) == pytest.approx(0.5)  # 500 rows already handed on
    clock.now += 0.5
    assert pacer.delay_s(1000) == pytest.approx(0.5)  # 1000 handed on by +1.0 s
    clock.now += 5.0  # a slow machine: behind the ceiling, nothing to wait for
    assert pacer.delay_s(1000) == 0.0
    unpaced = UploadPacer(rows_per_s_max=0.0, clock=clock)
    assert [unpaced.delay_s(10**6) for _ in range(3)] == [0.0, 0.0, 0.0]


def test_a_paced_upload_sends_everything_and_a_stop_cuts_its_wait_short(tmp_path):
    producer = FakeProducer()
    stop = threading.Event()
    uploader = FileUploader(producer, "flights.cid", 3, stop,
                            UploadSettings(stall_timeout_s=5.0, rows_per_s_max=1000.0))
    result = uploader.upload(reader_of(tmp_path, rows=23, batch_rows=5), 0, lambda *_: None)
    assert result.messages == 5 and result.rows == 23  # paced: 23 rows at 1000/s, ~20 ms

    slow = FileUploader(producer, "flights.cid", 3, stop,
                        UploadSettings(stall_timeout_s=5.0, rows_per_s_max=0.001))
    stopper = threading.Timer(0.2, stop.set)  # the second slice is due in 5,000 s
    stopper.start()
    with pytest.raises(UploadInterruptedError):
        slow.upload(reader_of(tmp_path, rows=23, batch_rows=5), 0, lambda *_: None)
    stopper.join()


def test_upload_settings_refuse_a_negative_ceiling():
    with pytest.raises(UploadConfigError, match="rows_per_s_max"):
        UploadSettings(rows_per_s_max=-1.0)
