"""CPU seconds and peak memory of processes and their descendants, read from Linux's /proc.

For benchmarks: a process tree's CPU time is the sum of its live members' `utime + stime` (plus
what they reaped of their children, `cutime + cstime`); its peak RSS is each member's `VmHWM`,
the largest resident set the kernel saw for it. A process that ended before the reading and
was not reaped by a member is missed: read while the processes of interest still run.

Pure reads of /proc; thread-safe. Raises nothing for a process that ends mid-reading (it is
left out). `PeakRssWatch` follows one child's peak while it runs (why not `ru_maxrss`: there).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# /proc/<pid>/stat fields after the command (which may hold spaces and parentheses): state is
# field 3; ppid 4; utime, stime, cutime, cstime are fields 14-17 (1-based, man proc(5)).
_PPID, _UTIME, _CSTIME = 4, 14, 17


@dataclass(frozen=True)
class TreeStats:
    """One process tree at one moment."""

    root_pid: int
    processes: int
    cpu_s: float  # every member's own and reaped children's CPU time
    peak_rss_bytes_max: int  # the largest peak RSS of one member
    peak_rss_bytes_sum: int  # the members' peak RSS added up (an upper bound of the tree's)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command sits in parentheses and may contain anything: split after its last ")".
    return ["pid", "comm", *text[text.rindex(")") + 2:].split()]


def _parent_pids() -> dict[int, int]:
    parents = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                parents[int(entry.name)] = int(fields[_PPID - 1])
    return parents


def descendants(root_pid: int) -> list[int]:
    """`root_pid` and every live process below it."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parent_pids().items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root_pid]
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        frontier.extend(children.get(pid, []))
    return found


def cpu_seconds(pid: int) -> float | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    ticks = sum(int(value) for value in fields[_UTIME - 1:_CSTIME])
    return ticks / CLOCK_TICKS_PER_S


def peak_rss_bytes(pid: int) -> int | None:
    try:
        lines = (PROC / str(pid) / "status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0  # a kernel thread or a zombie has none


def tree_stats(root_pid: int) -> TreeStats:
    cpu, peaks = 0.0, []
    members = descendants(root_pid)
    for pid in members:
        seconds, peak = cpu_seconds(pid), peak_rss_bytes(pid)
        if seconds is not None:
            cpu += seconds
        if peak is not None:
            peaks.append(peak)
    return TreeStats(root_pid, len(members), round(cpu, 2), max(peaks, default=0),
                     sum(peaks))


def disk_bytes(directory: Path) -> int:
    """Bytes the files under `directory` occupy on disk (allocated blocks, not sizes: broker
    segments are sparse until written). The brokers delete topics while this walks: a file or
    a directory gone meanwhile counts nothing (os.walk skips a directory it cannot list; a
    50-session run died of pathlib's rglob, which does not)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                stat = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue  # deleted while we walked
            total += stat.st_blocks * 512
    return total


class PeakRssWatch:
    """A child's own peak RSS, read from its `VmHWM` every `interval_s` until it ends.

    Not `wait4`'s `ru_maxrss`: Linux carries the parent's high-water mark into a child over
    fork (or vfork) and exec, so a child of a large benchmark process reports the benchmark's
    peak, not its own (a 13 MB `python -c pass` reports 813 MB under a parent that once held
    800 MB). `VmHWM` belongs to the address space exec made. The last reading before the
    child ends is kept: growth in its final `interval_s` is missed. Runs a daemon thread."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self._pid = pid
        self._interval_s = interval_s
        self._ended = threading.Event()
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rss-{pid}")
        self._thread.start()

    def _run(self) -> None:
        while not self._ended.is_set():
            peak = peak_rss_bytes(self._pid)
            if peak is None:
                return
            self.peak_bytes = max(self.peak_bytes, peak)
            self._ended.wait(self._interval_s)

    def stop(self) -> int:
        """Stop watching (the child has ended or is about to be reaped); its peak."""
        self._ended.set()
        self._thread.join()
        return self.peak_bytes
