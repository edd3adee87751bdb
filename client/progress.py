"""Upload progress for a person: a rich progress bar on a terminal, plain log lines otherwise.

Both show, per file: rows sent, rows/s, bytes of the file read, and the ETA from the bytes still
to read (the one quantity known in advance for a streamed CSV). `make_progress` picks the bar
when stdout is a terminal and log lines (every `log_interval_s`) when it is a pipe or a file,
e.g. under run_local or in a container. While flow control holds the upload back
(client.upload_window), both say so: "held back: backlog X MiB of Y MiB window, waiting for the
query service to fold" (the bar in its last column, the log every `log_interval_s`).

Thread-safety: called from the uploading thread only.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from client.upload_window import WindowStats

log = logging.getLogger(__name__)

LOG_INTERVAL_S_DEFAULT = 2.0
MIB = 1024 * 1024


class UploadProgress(Protocol):
    def start_file(self, name: str, total_bytes: int) -> None: ...

    def advance(self, rows: int, bytes_parsed: int) -> None: ...

    def finish_file(self, rows_total: int) -> None: ...

    def window(self, stats: WindowStats) -> None: ...

    def close(self) -> None: ...


def held_back_text(stats: WindowStats) -> str:
    return (f"held back: backlog {stats.backlog_bytes / MIB:,.1f} MiB of "
            f"{stats.window_bytes / MIB:,.1f} MiB window, waiting for the query service to fold")


class _RowsPerSecondColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        rows = task.fields.get("rows", 0)
        elapsed_s = task.elapsed or 0.0
        rate = rows / elapsed_s if elapsed_s > 0 else 0.0
        return Text(f"{rows:,} rows {rate:,.0f}/s", style="progress.data.speed")


class RichUploadProgress:
    """A bar per file: rows, rows/s, bytes read of the file, ETA."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description:>8}"),
            BarColumn(bar_width=20),  # the whole line fits 80 columns
            DownloadColumn(),
            _RowsPerSecondColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}", style="yellow"),
            console=console,
        )
        self._progress.start()
        self._task = None
        self._rows = 0

    def start_file(self, name: str, total_bytes: int) -> None:
        self._rows = 0
        self._task = self._progress.add_task(name, total=max(total_bytes, 1), rows=0, note="")

    def advance(self, rows: int, bytes_parsed: int) -> None:
        self._rows += rows
        self._progress.update(self._task, completed=bytes_parsed, rows=self._rows, note="")

    def window(self, stats: WindowStats) -> None:
        note = held_back_text(stats) if stats.partitions_held else ""
        self._progress.update(self._task, note=note)

    def finish_file(self, rows_total: int) -> None:
        task = self._progress.tasks[-1]
        self._progress.update(self._task, completed=task.total, rows=rows_total)

    def close(self) -> None:
        self._progress.stop()


class LogUploadProgress:
    """One log line per file every `log_interval_s`, and one when the file is done."""

    def __init__(self, log_interval_s: float = LOG_INTERVAL_S_DEFAULT,
                 clock: Callable[[], float] = time.monotonic,
                 emit: Callable[[str], None] | None = None) -> None:
        self.log_interval_s = log_interval_s
        self.clock = clock
        self.emit = emit or (lambda line: print(line, flush=True))
        self._name = ""
        self._total_bytes = 0
        self._rows = 0
        self._bytes = 0
        self._started_at = 0.0
        self._logged_at = 0.0

    def start_file(self, name: str, total_bytes: int) -> None:
        self._name, self._total_bytes = name, total_bytes
        self._rows = self._bytes = 0
        self._started_at = self._logged_at = self.clock()

    def advance(self, rows: int, bytes_parsed: int) -> None:
        self._rows += rows
        self._bytes = bytes_parsed
        now = self.clock()
        if now - self._logged_at >= self.log_interval_s:
            self._logged_at = now
            self.emit(self.line(now))

    def window(self, stats: WindowStats) -> None:
        """The held-back line, at most every `log_interval_s` (the progress line's clock)."""
        now = self.clock()
        if stats.partitions_held and now - self._logged_at >= self.log_interval_s:
            self._logged_at = now
            self.emit(f"upload {self._name}: {held_back_text(stats)}")

    def line(self, now: float) -> str:
        elapsed_s = max(now - self._started_at, 1e-9)
        share = self._bytes / self._total_bytes if self._total_bytes else 1.0
        eta_s = elapsed_s * (1 - share) / share if share > 0 else float("inf")
        return (f"upload {self._name}: {self._rows:,} rows, {self._bytes / MIB:,.1f} of "
                f"{self._total_bytes / MIB:,.1f} MiB ({share:.0%}), "
                f"{self._rows / elapsed_s:,.0f} rows/s, ETA {eta_s:,.0f} s")

    def finish_file(self, rows_total: int) -> None:
        elapsed_s = max(self.clock() - self._started_at, 1e-9)
        self.emit(f"upload {self._name}: done, {rows_total:,} rows in {elapsed_s:,.1f} s "
                  f"({rows_total / elapsed_s:,.0f} rows/s)")

    def close(self) -> None:
        """Nothing to release: log lines need no teardown."""


def make_progress(stream=None) -> UploadProgress:
    stream = stream or sys.stdout
    if stream.isatty():
        return RichUploadProgress(Console(file=stream))
    return LogUploadProgress()
