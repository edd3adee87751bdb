"""FileUploader with an UploadWindow, against a fake producer that answers dense offsets: held
back at the window and released as the log start moves, the progress hook called while held, a
stop while held ending the upload promptly, and a resumed upload rebuilding its window exactly
from the skipped messages above the log start and the re-sent ones."""

import threading
import time

import pytest

from client.csv_reader import FLIGHTS_DIALECT, CsvSliceReader
from client.upload_window import UploadWindow
from client.uploader import FileUploader, UploadInterruptedError, UploadSettings
from common.flights.arrow_rows import COMPRESSION_DEFAULT, encode_rows

DEADLINE_S = 10.0


class OffsetProducer:
    """Stores each (partition, sequence) once at the next offset of its partition, answering
    the stored offset for a repeat, like the broker for one producer."""

    def __init__(self, stored=0):
        """`stored`: the first sequences of partition 0 it holds already (an earlier run)."""
        self.lock = threading.Lock()
        self.offsets = {(0, sequence): sequence for sequence in range(stored)}
        self.sends = []  # (partition, sequence, payload bytes), every call

    def send_batch(self, topic, partition, payloads, sequence=None):
        with self.lock:
            self.sends.append((partition, sequence, len(payloads[0])))
            key = (partition, sequence)
            if key not in self.offsets:
                self.offsets[key] = sum(1 for p, _ in self.offsets if p == partition)
            return self.offsets[key]


class LogStarts:
    def __init__(self, partitions):
        self.starts = [0] * partitions

    def __call__(self, partition):
        return self.starts[partition]


def reader_of(tmp_path, rows=23, batch_rows=5):
    path = tmp_path / "f.csv"
    path.write_text("n,sq\n" + "".join(f"{i},{i * i}\n" for i in range(rows)))
    return CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=batch_rows)


def wait_until(condition, what):
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


class Upload:
    """One upload on its own thread (as the runner's main thread runs it)."""

    def __init__(self, tmp_path, window, messages_acked=0, partitions=1):
        assert messages_acked == 0 or partitions == 1
        self.producer = OffsetProducer(stored=messages_acked)
        self.stop = threading.Event()
        self.idle_calls = 0
        self.error = None
        self.result = None
        self.uploader = FileUploader(self.producer, "flights.cid", partitions, self.stop,
                                     UploadSettings(stall_timeout_s=5.0), window, self._idle)
        self.reader = reader_of(tmp_path)
        self.thread = threading.Thread(target=self._run, args=(messages_acked,))
        self.thread.start()

    def _idle(self):
        self.idle_calls += 1

    def _run(self, messages_acked):
        try:
            self.result = self.uploader.upload(self.reader, messages_acked, lambda *_: None)
        except UploadInterruptedError as error:
            self.error = error

    def sent(self):
        with self.producer.lock:
            return len(self.producer.sends)

    def join(self):
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), "the upload did not end"


def window_of(window_bytes, starts, partitions=1):
    return UploadWindow(window_bytes, partitions, starts, time.monotonic, poll_interval_s=0.005)


def test_held_back_at_the_window_and_released_as_the_log_start_moves(tmp_path):
    starts = LogStarts(1)
    window = window_of(1, starts)  # any record fills the share: one record at a time
    upload = Upload(tmp_path, window)
    wait_until(lambda: upload.sent() == 1 and window.stats().partitions_held == 1,
               "held back after the first record")
    idle_before = upload.idle_calls
    wait_until(lambda: upload.idle_calls > idle_before + 3, "the progress hook while held")
    assert upload.sent() == 1, "nothing produced while held back"
    starts.starts[0] = 1  # the service folded offset 0
    wait_until(lambda: upload.sent() == 2 and window.stats().partitions_held == 1,
               "released for exactly one more record")
    starts.starts[0] = 100
    upload.join()
    assert upload.error is None and upload.result.messages == 5 and upload.sent() == 5
    stats = window.stats()
    assert stats.held_back_s > 0 and stats.partitions_held == 0
    assert stats.backlog_bytes_peak == max(size for *_, size in upload.producer.sends)


def test_a_stop_while_held_back_ends_the_upload_promptly(tmp_path):
    starts = LogStarts(1)
    window = window_of(1, starts)
    upload = Upload(tmp_path, window)
    wait_until(lambda: window.stats().partitions_held == 1, "held back")
    stopped_at = time.monotonic()
    upload.stop.set()
    upload.join()
    assert time.monotonic() - stopped_at < 1.0
    assert isinstance(upload.error, UploadInterruptedError) and upload.sent() == 1


def test_partitions_are_held_back_each_on_its_own_share(tmp_path):
    starts = LogStarts(2)
    window = window_of(2, starts, partitions=2)  # a share of one byte each
    upload = Upload(tmp_path, window, partitions=2)
    wait_until(lambda: window.stats().partitions_held == 2, "both partitions held")
    assert sorted(p for p, *_ in upload.producer.sends) == [0, 1]
    starts.starts[1] = 100  # only partition 1 is folded
    wait_until(lambda: upload.sent() == 3, "partition 1 released")
    assert window.stats().partitions_held >= 1  # partition 0 still waits
    starts.starts[0] = 100
    upload.join()
    assert upload.error is None and upload.sent() == 5


def test_a_resumed_upload_rebuilds_its_window_exactly(tmp_path):
    """Messages 0-2 acknowledged before the restart, the log start at 1: 1 and 2 are sized
    (encoded, not sent), 0 is folded; 3 and 4 are sent and counted; nothing is held wrongly."""
    payload_bytes = [len(encode_rows(rows, COMPRESSION_DEFAULT))
                     for rows in reader_of(tmp_path).slices()]
    starts = LogStarts(1)
    starts.starts[0] = 1
    window = window_of(1 << 30, starts)
    upload = Upload(tmp_path, window, messages_acked=3)
    upload.join()
    assert upload.error is None and [s for _, s, _ in upload.producer.sends] == [3, 4]
    assert window.backlog_bytes(0) == sum(payload_bytes[1:])
    assert window.stats().log_start_polls == 1


@pytest.mark.parametrize("folded", [0, 5])
def test_a_resumed_upload_held_by_what_it_skipped_is_released_by_the_log_start(tmp_path,
                                                                             folded):
    """A window smaller than what the earlier run left unfolded: the resumed run waits
    (bounded) until the log start passes it, or goes at once when it was folded already."""
    starts = LogStarts(1)
    starts.starts[0] = folded
    window = window_of(1, starts)
    upload = Upload(tmp_path, window, messages_acked=3)
    if folded == 0:
        wait_until(lambda: window.stats().partitions_held == 1, "held by the skipped ones")
        assert upload.sent() == 0
        starts.starts[0] = 100
    upload.join()
    assert upload.error is None and upload.sent() == 2
