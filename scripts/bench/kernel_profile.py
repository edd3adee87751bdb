"""Where a process's CPU goes, kernel included: Linux `perf` sampling running processes with
their call graphs, summarised into the few figures a broker's cost per byte comes down to.

Why beside py-spy (profile.py): py-spy charges native and kernel time to the Python frame that
called it. A broker spends three quarters of its CPU in the kernel, so a py-spy profile that
says "36 % copying batches into the segment map" cannot tell the copy from the page faults the
copy takes. perf sees both: on this machine kind most of a broker's CPU is the kernel filling
fresh page-cache pages with zeros on the first write of each (docs/benchmarks.md).

Figures (shares of the process's samples; a sample is one thread on a CPU at one tick):
- `page_faults`: everything under the page-fault entry (`asm_exc_page_fault`), callees
  included: the faults of writes into fresh pages of a segment's map or of new memory;
- `zero_fill`: the kernel zeroing pages (`clear_page_*`, and the `memset` readahead uses on a
  file hole), whatever called it: the first touch of each new page;
- each system call with its callees (`__x64_sys_*`), the largest first;
- self time by shared object (`kernel`, `libpython`, `blake3` the MAC, `_crc32c` the CRC...).

Threads: none of its own; one `perf record` child process per target, stopped with SIGINT (on
which perf writes its file). Raises KernelProfilerUnavailableError when no `perf` is on PATH.
"""

from __future__ import annotations

import errno
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.bench.errors import BenchError

PERF = "perf"
RATE_HZ_DEFAULT = 999
STOP_TIMEOUT_S = 60.0
# perf reads every thread's memory map before it samples: a JVM's take seconds.
START_TIMEOUT_S = 180.0
SYSCALLS_SHOWN = 5
OBJECTS_SHOWN = 6
PAGE_FAULT_ENTRY = "asm_exc_page_fault"
# Kernel functions that zero a page on its first use: a fresh anonymous page, and the holes a
# write fault on a sparse or preallocated file reads ahead.
ZERO_FILL = ("clear_page_erms", "clear_page_rep", "clear_page_orig", "__pi_memset")
_CHILDREN_LINE = re.compile(r"^\s*(?P<children>[\d.]+)%\s+(?P<self>[\d.]+)%\s+\[.\]\s+"
                            r"(?P<symbol>\S.*?)\s*$")
_SELF_LINE = re.compile(r"^\s*(?P<share>[\d.]+)%\s+(?P<samples>\d+)\s+(?P<name>\S.*?)\s*$")


class KernelProfilerUnavailableError(BenchError):
    """`--perf` was asked for but no `perf` executable is on PATH."""

    def __init__(self) -> None:
        super().__init__("--perf needs Linux perf on PATH (Debian: apt-get install "
                         "linux-perf)")


@dataclass(frozen=True)
class KernelProfile:
    """One process's summary (shares in percent of its samples)."""

    name: str
    path: Path
    samples: int
    rate_hz: int
    page_faults_pct: float
    zero_fill_pct: float
    syscalls_pct: tuple[tuple[str, float], ...]  # (system call, share with callees), largest 1st
    objects_pct: tuple[tuple[str, float], ...]  # (shared object, self share), largest first

    @property
    def sampled_cpu_s(self) -> float:
        return self.samples / self.rate_hz

    def as_json(self) -> dict:
        return {"file": str(self.path), "samples": self.samples,
                "sampled_cpu_s": round(self.sampled_cpu_s, 2),
                "page_faults_pct": self.page_faults_pct, "zero_fill_pct": self.zero_fill_pct,
                "syscalls_pct": dict(self.syscalls_pct), "objects_pct": dict(self.objects_pct)}

    def line(self) -> str:
        syscalls = ", ".join(f"{name} {pct:.0f}%" for name, pct in self.syscalls_pct)
        objects = ", ".join(f"{name} {pct:.0f}%" for name, pct in self.objects_pct)
        return (f"{self.name}: {self.sampled_cpu_s:.2f} CPU-s sampled; page faults "
                f"{self.page_faults_pct:.0f}% (zeroing fresh pages {self.zero_fill_pct:.0f}%); "
                f"system calls: {syscalls}; self time: {objects}")


def find_perf() -> str:
    found = shutil.which(PERF)
    if found is None:
        raise KernelProfilerUnavailableError()
    return found


class KernelProfiler:
    """`perf record -g` attached to running processes; `stop` ends them all and summarises."""

    def __init__(self, out_dir: Path, rate_hz: int = RATE_HZ_DEFAULT) -> None:
        self._perf = find_perf()
        self.out_dir = out_dir
        self.rate_hz = rate_hz
        self._running: dict[str, tuple[subprocess.Popen, Path]] = {}
        self.profiles: dict[str, KernelProfile] = {}  # by name, once the `with` block ended
        out_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, pids: int | Sequence[int]) -> None:
        """Sample `pids` (one process or several, counted as one: a process tree), their
        threads and the threads they start later, into OUT_DIR/NAME.perf.data."""
        assert name not in self._running, name
        # A process of the tree that ended meanwhile would make perf refuse the whole list.
        pids = [pid for pid in ([pids] if isinstance(pids, int) else pids) if _alive(pid)]
        path = self.out_dir / f"{name}.perf.data"
        log = self.out_dir / f"{name}.perf.log"
        control, ack = path.with_suffix(".control"), path.with_suffix(".ack")
        for fifo in (control, ack):
            fifo.unlink(missing_ok=True)
            os.mkfifo(fifo)
        # Events off (-D -1) until perf has attached to every thread and says so on the ack
        # fifo: the work to profile starts after `start` returns, none of it unsampled.
        with open(log, "wb") as log_file:
            proc = subprocess.Popen([self._perf, "record", "-F", str(self.rate_hz), "-g", "-o",
                                     str(path), "-D", "-1", "--control",
                                     f"fifo:{control},{ack}", "-p", ",".join(map(str, pids))],
                                    stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT)
        self._running[name] = (proc, path)
        if not _enable(proc, control, ack, time.monotonic() + START_TIMEOUT_S):
            raise BenchError(f"perf did not start recording {name} (pids {pids}): "
                             f"{log.read_text(errors='replace').strip()[-500:]}")

    def __enter__(self) -> KernelProfiler:
        return self

    def __exit__(self, *exc_info) -> None:
        self.profiles = {profile.name: profile for profile in self.stop()}

    def stop(self) -> list[KernelProfile]:
        for proc, _ in self._running.values():
            proc.send_signal(signal.SIGINT)
        profiles = []
        for name, (proc, path) in self._running.items():
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child; its file may be cut short, the report says so
                proc.wait()
            for fifo in (path.with_suffix(".control"), path.with_suffix(".ack")):
                fifo.unlink(missing_ok=True)
            profiles.append(summarise(self._perf, name, path, self.rate_hz))
        self._running.clear()
        return profiles


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _enable(proc: subprocess.Popen, control: Path, ack: Path, deadline: float) -> bool:
    """Tell a `perf record -D -1 --control fifo:CONTROL,ACK` to start sampling; True once it
    acknowledged, False if it exited or the deadline passed first."""
    control_fd = ack_fd = -1
    try:
        while control_fd < 0:
            try:  # no reader yet (perf still starting) is ENXIO: try again
                control_fd = os.open(control, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as error:
                if error.errno != errno.ENXIO or proc.poll() is not None \
                        or time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        os.write(control_fd, b"enable\n")
        while True:
            ready, _, _ = select.select([ack_fd], [], [], 0.05)
            if ready and os.read(ack_fd, 64).startswith(b"ack"):
                return True
            if proc.poll() is not None or time.monotonic() > deadline:
                return False
    finally:
        for fd in (control_fd, ack_fd):
            if fd >= 0:
                os.close(fd)


def summarise(perf: str, name: str, path: Path, rate_hz: int) -> KernelProfile:
    with_callees = _report(perf, path, ["--children", "--sort", "sym"])
    by_object = _report(perf, path, ["--no-children", "-n", "--sort", "dso"])
    return parse_summary(name, path, rate_hz, with_callees, by_object)


def parse_summary(name: str, path: Path, rate_hz: int, with_callees: str,
                  by_object: str) -> KernelProfile:
    """The summary from two `perf report --stdio -g none` texts: by symbol with callees
    (`--children --sort sym`) and self time by shared object with sample counts
    (`--no-children -n --sort dso`), whose counts add up to the process's samples."""
    page_faults = zero_fill = 0.0
    syscalls: list[tuple[str, float]] = []
    for line in with_callees.splitlines():
        match = _CHILDREN_LINE.match(line)
        if match is None:
            continue
        symbol = match["symbol"]
        if symbol == PAGE_FAULT_ENTRY:
            page_faults = float(match["children"])
        elif symbol in ZERO_FILL:
            zero_fill += float(match["self"])
        elif symbol.startswith("__x64_sys_"):
            syscalls.append((symbol.removeprefix("__x64_sys_"), float(match["children"])))
    objects = []
    samples = 0
    for line in by_object.splitlines():
        match = None if line.startswith("#") else _SELF_LINE.match(line)
        if match is not None:
            objects.append((_object_name(match["name"]), float(match["share"])))
            samples += int(match["samples"])
    syscalls.sort(key=lambda item: -item[1])
    return KernelProfile(name, path, samples, rate_hz, page_faults, round(zero_fill, 2),
                         tuple(syscalls[:SYSCALLS_SHOWN]), tuple(objects[:OBJECTS_SHOWN]))


def _object_name(dso: str) -> str:
    """`[kernel.kallsyms]` -> kernel, `libpython3.11.so.1.0` -> libpython3.11,
    `blake3.cpython-311-x86_64-linux-gnu.so` -> blake3."""
    if dso.startswith("[kernel"):
        return "kernel"
    return re.sub(r"(\.cpython-[^.]*)?\.so(\.[\d.]+)?$", "", dso)


def _report(perf: str, path: Path, sort: list[str]) -> str:
    done = subprocess.run([perf, "report", "-i", str(path), "--stdio", "-g", "none", *sort],
                          capture_output=True, text=True, timeout=STOP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise BenchError(f"perf report of {path} failed: {done.stderr.strip()[-500:]}")
    return done.stdout
