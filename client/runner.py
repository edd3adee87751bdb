"""One client session from start to results (DESIGN §1 steps 1-5, the client's side).

    open      create the session's topics
    upload    the airports file (client.uploader); then SessionStarted{airports end offsets};
              then the flights file, held back by the upload window (client.upload_window)
              when it runs `upload_window_bytes` ahead of the query service's folding;
              checkpointing the acknowledged prefix of each file (client.resume) every
              `checkpoint_interval_s`
    end       SessionEnded{end offsets, rows sent, rows rejected by kind}
    results   follow results.<cid> until Q1-Q4 are complete (client.results), printing rows
              and streaming them to q1.csv ... q4.csv, each fsynced and renamed into place when
              its query is complete (client.report.QueryFiles)
    report    report.html, summary.json (client.report), fsynced; then the checkpoint says
              `results_saved`
    ack       ResultsAcked on `sessions`: the query service may now delete the session's topics
              (the checkpoint then says `results_acked`)

Resume: a run with the client id of an earlier one loads its checkpoint and skips whatever that
run had finished; without a checkpoint it re-sends everything and the broker drops the repeats.
SessionStarted is written (sequence 0: a repeat is a duplicate) whenever the checkpoint does not
say it was acknowledged, after the airports and before any flights batch: a checkpoint saying
so is saved before the flights upload starts.
A run resumed once the results are saved touches no session topic (they may be gone): it checks
that q1.csv ... q4.csv are there, keeps the earlier summary's counts, writes the ack if the
earlier run did not, and completes. An ack that cannot be written (broker away past
`stall_timeout_s`, or a stop) leaves the session completed with `results_acked` false in
summary.json; a run with the same client id writes it.
`run_session` always leaves a summary.json whose `status` says how it ended; it returns the
summary, and raises nothing but programmer errors: failures are in `status` and `error`.

Thread-safety: one session per call; `stop` may be set from a signal handler or another thread.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from client.console import ResultPrinter
from client.csv_reader import (
    AIRPORTS_DIALECT,
    FLIGHTS_DIALECT,
    SLICE_BYTES_DEFAULT,
    CsvReaderError,
    CsvSliceReader,
    rows_per_slice,
)
from client.partition_producers import PartitionProducers
from client.progress import UploadProgress
from client.report import (
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    ChartData,
    QueryFiles,
    Summary,
    query_file,
    read_summary,
    write_report,
    write_summary,
)
from client.results import (
    RESULTS_TIMEOUT_S_DEFAULT,
    ResultsError,
    ResultsFollower,
    ResultsInterruptedError,
)
from client.resume import (
    FileProgress,
    ResumeError,
    ResumeState,
    SavedResultsMissingError,
    SessionCheckpoint,
)
from client.session import SessionControl, SessionError, data_topics
from client.upload_window import POLL_INTERVAL_S_DEFAULT, WINDOW_BYTES_DEFAULT, UploadWindow
from client.uploader import FileUploader, UploadInterruptedError, UploadSettings
from common.checkpoint import CheckpointError
from common.flights.session_records import QUERIES, SessionEnded, airports_topic, flights_topic
from common.kaska import Admin, Consumer, Producer
from common.kaska.patience import STALL_TIMEOUT_S_DEFAULT, BrokerWaitError, StoppedWhileWaitingError

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S_DEFAULT = 0.5
PARTITIONS_DEFAULT = 4
STATE_SUBDIR = "state"
# What a resumed run whose results are saved keeps from the earlier run's summary.json.
RESTORED_SUMMARY_FIELDS = ("rows_sent", "rows_rejected", "rejected_samples",
                           "rows_invalid_for_queries", "rows_per_query", "duplicates_dropped",
                           "upload", "upload_window")
INTERRUPTIONS = (UploadInterruptedError, ResultsInterruptedError, StoppedWhileWaitingError)
FAILURES = (CsvReaderError, BrokerWaitError, ResultsError, ResumeError, SessionError,
            CheckpointError, OSError)


@dataclass(frozen=True)
class ClientConfig:
    flights: Path
    airports: Path
    brokers: str
    results_dir: Path
    client_id: str
    # Rows per message: `batch_rows` when given, else as many as make ~`slice_bytes` of the
    # flights file's text (client.csv_reader.rows_per_slice), for both files.
    batch_rows: int | None = None
    slice_bytes: int = SLICE_BYTES_DEFAULT
    partitions: int = PARTITIONS_DEFAULT
    state_dir: Path | None = None
    checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S_DEFAULT
    stall_timeout_s: float = STALL_TIMEOUT_S_DEFAULT
    results_timeout_s: float = RESULTS_TIMEOUT_S_DEFAULT
    rows_shown_max: int = 5
    upload_rows_per_s_max: float = 0.0  # UploadSettings.rows_per_s_max
    # Flow control of the flights upload (client.upload_window); 0: none.
    upload_window_bytes: int = WINDOW_BYTES_DEFAULT
    window_poll_interval_s: float = POLL_INTERVAL_S_DEFAULT
    token: str | None = None
    cluster_options: dict = field(default_factory=dict)

    @property
    def effective_state_dir(self) -> Path:
        return self.state_dir or self.results_dir / STATE_SUBDIR

    def file_paths(self) -> dict[str, Path]:
        return {"airports": self.airports, "flights": self.flights}


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ClientSession:
    """Carries one session through its phases (module doc); `run` does it all."""

    def __init__(self, config: ClientConfig, stop: threading.Event,
                 progress: UploadProgress, printer: ResultPrinter | None = None) -> None:
        self.config = config
        self.stop = stop
        self.progress = progress
        self.printer = printer or ResultPrinter(config.rows_shown_max)
        self.summary = Summary(client_id=config.client_id, started_at=_now_text())
        self.started_at = time.monotonic()
        self.upload_started_at = self.started_at
        self.readers: dict[str, CsvSliceReader] = {}
        self.state: ResumeState | None = None
        self.checkpoint = SessionCheckpoint(config.effective_state_dir, config.client_id)
        options = {"token": config.token, **config.cluster_options}
        self.admin = Admin(config.brokers, **options)
        self.producer = Producer(config.brokers, config.client_id, **options)
        self.data_producers = PartitionProducers(config.brokers, config.client_id, **options)
        self.consumer = Consumer(config.brokers, group=f"client-{config.client_id}", **options)
        self.control = SessionControl(self.admin, self.producer, self.consumer,
                                      config.client_id, config.partitions, stop,
                                      config.stall_timeout_s)
        self.window = self._make_window()

    def _make_window(self) -> UploadWindow | None:
        if self.config.upload_window_bytes == 0:
            return None
        topic = flights_topic(self.config.client_id)
        return UploadWindow(self.config.upload_window_bytes, self.config.partitions,
                            lambda partition: self.control.log_start(topic, partition),
                            time.monotonic, self.config.window_poll_interval_s)

    def run(self) -> Summary:
        try:
            charts = self._run_phases()
            self.summary.status = STATUS_COMPLETED
            if charts is not None:
                self._report(charts)
            self._acknowledge()
        except INTERRUPTIONS as error:
            self.summary.status, self.summary.error = STATUS_INTERRUPTED, str(error)
            log.warning("session %s interrupted: %s", self.config.client_id, error)
        except FAILURES as error:
            self.summary.status = STATUS_FAILED
            self.summary.error = f"{type(error).__name__}: {error}"
            log.error("session %s failed: %s", self.config.client_id, self.summary.error)
        finally:
            self._finish()
        return self.summary

    def _run_phases(self) -> ChartData | None:
        """What the report's charts need once q1.csv ... q4.csv are written, or None when an
        earlier run saved the results already."""
        self._open()
        if self.state.results_saved:
            self._restore_saved_results()
            return None
        if self.state.session_ended is None:
            self._upload()
            self._end()
        else:
            log.info("session %s: upload already complete (resumed); waiting for results",
                     self.config.client_id)
        self._fill_upload_summary()
        return self._collect_results()

    # --- phases ---------------------------------------------------------------------------

    def _open(self) -> None:
        batch_rows = (self.config.batch_rows
                      or rows_per_slice(self.config.flights, self.config.slice_bytes))
        for name, path in self.config.file_paths().items():
            dialect = AIRPORTS_DIALECT if name == "airports" else FLIGHTS_DIALECT
            self.readers[name] = CsvSliceReader(path, dialect, batch_rows)
        fresh = ResumeState(self.config.client_id, self.config.partitions, batch_rows,
                            {name: FileProgress(r.file_bytes) for name, r in self.readers.items()})
        self.state = self.checkpoint.load_or(fresh)
        self.summary.resumed = self.state.resumed
        if self.state.results_saved:
            return  # the session's topics may be deleted already: never make them again
        self.control.create_topics()
        self._timing("open_session", self.started_at)

    def _upload(self) -> None:
        self.upload_started_at = time.monotonic()
        try:
            for name, reader in self.readers.items():
                if name == "flights":
                    self._start_session()
                if not self.state.file_done(name):
                    self._upload_file(name, reader)
        finally:
            self.progress.close()
            self._fill_window_summary()

    def _start_session(self) -> None:
        """SessionStarted with the airports' end offsets, once they are all acknowledged, and
        checkpointed as acknowledged before any flights batch is sent."""
        assert self.state.file_done("airports")
        if self.state.session_started:
            return
        ends = self.control.topic_end_offsets(airports_topic(self.config.client_id))
        self.control.write_started(ends)
        self.state.session_started = True
        self.checkpoint.save(self.state)
        log.info("session %s started: airports end offsets %s", self.config.client_id, ends)

    def _upload_file(self, name: str, reader: CsvSliceReader) -> None:
        topics = data_topics(self.config.client_id)
        settings = UploadSettings(stall_timeout_s=self.config.stall_timeout_s,
                                  rows_per_s_max=self.config.upload_rows_per_s_max)
        # The airports are never held back: small, and needed whole before any flight.
        window = self.window if name == "flights" else None
        uploader = FileUploader(self.data_producers, topics[name], self.config.partitions,
                                self.stop, settings, window, self._window_shown(window))
        started = time.monotonic()
        self.progress.start_file(name, reader.file_bytes)
        try:
            result = uploader.upload(reader, self.state.files[name].messages_acked,
                                     self._ack_recorder(name, reader))
        finally:
            self.checkpoint.save_quietly(self.state)
        self.progress.finish_file(result.rows)
        progress = self.state.files[name]
        progress.rows_sent, progress.rows_rejected = result.rows, dict(reader.rejected.counts)
        self.checkpoint.save(self.state)
        self.summary.upload[name] = {
            "messages": result.messages, "payload_bytes": result.payload_bytes,
            "messages_sent": result.messages_sent, "messages_skipped": result.messages_skipped}
        self.summary.rejected_samples += [
            {"file": name, "kind": s.kind, "line": s.line, "text": s.text}
            for s in reader.rejected.samples]
        self._timing(f"upload_{name}", started)

    def _window_shown(self, window: UploadWindow | None):
        """What the uploader calls while it waits: the progress display's held-back line."""
        if window is None:
            return lambda: None
        return lambda: self.progress.window(window.stats())

    def _ack_recorder(self, name: str, reader: CsvSliceReader):
        progress = self.state.files[name]
        saved_at = time.monotonic()

        def on_ack(messages_acked: int, rows: int) -> None:
            nonlocal saved_at
            progress.messages_acked = messages_acked
            self.progress.advance(rows, reader.bytes_parsed)
            now = time.monotonic()
            if now - saved_at >= self.config.checkpoint_interval_s:
                saved_at = now
                self.checkpoint.save_quietly(self.state)

        return on_ack

    def _end(self) -> None:
        rejected: dict[str, int] = {}
        for progress in self.state.files.values():
            for kind, count in (progress.rows_rejected or {}).items():
                rejected[kind] = rejected.get(kind, 0) + count
        ended = SessionEnded(
            client_id=self.config.client_id,
            end_offsets=self.control.end_offsets(),
            rows_sent={name: p.rows_sent or 0 for name, p in self.state.files.items()},
            rows_rejected=rejected,
        )
        self.control.write_ended(ended)
        self.state.session_ended = ended
        self.checkpoint.save(self.state)
        self._timing("upload", self.upload_started_at)
        log.info("session %s: upload complete (%s rows sent, %s rejected); waiting for results",
                 self.config.client_id, ended.rows_sent, rejected)

    def _fill_window_summary(self) -> None:
        if self.window is None:
            self.summary.upload_window = {"window_bytes": 0}
            return
        stats = self.window.stats()
        self.summary.upload_window = {
            "window_bytes": stats.window_bytes, "held_back_s": round(stats.held_back_s, 3),
            "backlog_bytes_peak": stats.backlog_bytes_peak,
            "log_start_polls": stats.log_start_polls}

    def _fill_upload_summary(self) -> None:
        self.summary.rows_sent = dict(self.state.session_ended.rows_sent)
        self.summary.rows_rejected = {name: dict(p.rows_rejected or {})
                                      for name, p in self.state.files.items()}

    def _collect_results(self) -> ChartData:
        """Follow the results into q1.csv ... q4.csv (each fsynced when complete) and the
        charts' data."""
        waiting_since = time.monotonic()
        charts = ChartData()
        with QueryFiles(self.config.results_dir) as files:
            follower = ResultsFollower(self.consumer, self.config.client_id, self.stop,
                                       self.printer.on_rows, self.printer.on_done,
                                       self.config.results_timeout_s, self.config.stall_timeout_s,
                                       sinks=(files, charts))
            table = follower.follow()
            assert not files.unfinished, files.unfinished
        if follower.stats.first_record_at is not None:
            self.summary.timings_s["first_result_after_upload"] = round(
                follower.stats.first_record_at - waiting_since, 3)
        self._timing("results_wait", waiting_since)
        self.summary.duplicates_dropped = {"result_rows": table.duplicate_rows,
                                           "query_done": table.duplicate_done}
        self.summary.rows_per_query = {q: table.done[q].rows for q in QUERIES}
        self.summary.rows_invalid_for_queries = {q: dict(table.done[q].invalid) for q in QUERIES}
        return charts

    def _report(self, charts: ChartData) -> None:
        """report.html and summary.json (q1.csv ... q4.csv are fsynced already), then the
        checkpoint says the results are saved."""
        self._timing("total", self.started_at)
        write_report(self.config.results_dir, charts, self.summary)
        write_summary(self.config.results_dir, self.summary)
        self.state.results_saved = True
        self.checkpoint.save(self.state)

    def _restore_saved_results(self) -> None:
        missing = [query for query in QUERIES
                   if not query_file(self.config.results_dir, query).is_file()]
        if missing:
            raise SavedResultsMissingError(
                f"an earlier run saved the results, but {', '.join(missing)} (.csv) are not "
                f"in {self.config.results_dir}; the session's topics may be deleted: start a "
                "new session")
        try:
            previous = read_summary(self.config.results_dir) or {}
        except ValueError:
            previous = {}  # never torn (written by rename); a foreign file: counts unknown
        if previous.get("client_id") == self.config.client_id:
            for name in RESTORED_SUMMARY_FIELDS:
                if name in previous:
                    setattr(self.summary, name, previous[name])
        else:
            self._fill_upload_summary()
        log.info("session %s: results already saved in %s by an earlier run",
                 self.config.client_id, self.config.results_dir)

    def _acknowledge(self) -> None:
        """ResultsAcked on `sessions` (once): the results are on disk for good."""
        assert self.state.results_saved
        if not self.state.results_acked:
            try:
                self.control.write_acked(self.summary.rows_per_query)
            except BrokerWaitError as error:
                log.error("session %s: results saved, but not acknowledged (%s); run again with "
                          "--client-id %s to let the query service delete the session's "
                          "topics", self.config.client_id, error, self.config.client_id)
                return
            self.state.results_acked = True
            self.checkpoint.save_quietly(self.state)
            log.info("session %s: results acknowledged", self.config.client_id)
        self.summary.results_acked = True

    # --- bookkeeping ----------------------------------------------------------------------

    def _timing(self, name: str, since: float) -> None:
        """Record the seconds since `since` (a time.monotonic() reading) under `name`."""
        self.summary.timings_s[name] = round(time.monotonic() - since, 3)

    def _finish(self) -> None:
        if self.state is not None:
            self.checkpoint.save_quietly(self.state)
        self.summary.finished_at = _now_text()
        if "total" not in self.summary.timings_s:
            self._timing("total", self.started_at)
        try:
            write_summary(self.config.results_dir, self.summary)
        except OSError as error:
            log.error("cannot write the summary: %s", error)
        for closable in (self.data_producers, self.producer, self.consumer, self.admin):
            closable.close()


def run_session(config: ClientConfig, stop: threading.Event, progress: UploadProgress,
                printer: ResultPrinter | None = None) -> Summary:
    return ClientSession(config, stop, progress, printer).run()
