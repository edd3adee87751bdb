"""Per-process profiles of a pipeline session: py-spy attached to each platform process and to
the client while the session runs, one collapsed-stack file per process, and the summary the
benchmark prints ("self time by function": where each process's samples end).

Why py-spy: it samples a running interpreter from outside (ptrace and reads of the target's
memory), so the processes run unchanged, started as the benchmark measures them; with
`--nonblocking` it does not even pause them. What it sees is Python: the query service's JVM
(a child of its Python driver) is not profiled, only its Python driver and workers
(`--subprocesses`); native time inside a C extension is charged to the Python frame that
called it.

File format (py-spy's `--format raw`, Brendan Gregg's collapsed stacks): one line per distinct
stack, `frame;frame;...;leaf COUNT`, outermost frame first, each frame `function (file:line)`;
with `--subprocesses` the first frame names the process (`process 123:"python -m ..."`).
A sample is one thread seen active at one tick (py-spy leaves out threads the kernel reports
sleeping), so on a quiet machine samples / rate_hz approximates the process's CPU seconds. On
a loaded one it does not: a thread woken from a timed wait sits runnable in the run queue, and
is sampled inside `Condition.wait` or `select` although it uses no CPU (a 20k-row run at load
40 sampled 20 s in a broker that used 1.2 CPU-s). `gil=True` (py-spy `--gil`) keeps only the
thread holding the GIL: Python's own work, without the waits, but also without native code
that releases the GIL (Arrow, LZ4, fsync, socket calls). The report sets the process's CPU
seconds (from /proc) beside the sampled ones, and flags the difference.

Threads: none of its own; py-spy runs as child processes, one per target, stopped with SIGINT
(on which py-spy writes its file) at the end of the session, or when its target exits.
Raises ProfilerUnavailableError when no py-spy executable is found.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scripts.bench.errors import BenchError

PY_SPY = "py-spy"
RATE_HZ_DEFAULT = 100  # py-spy's default: ~1 % of one core per target in py-spy itself
TOP_FUNCTIONS_SHOWN = 8
STOP_TIMEOUT_S = 30.0  # py-spy writes its file on SIGINT; a large profile takes a moment
# "function (file.py:123)": the line number is dropped so that a function's lines add up.
_LINE_NUMBER = re.compile(r":\d+\)$")
# `--subprocesses` names the process in a stack's first frame; a stack of that frame alone is a
# sample of a thread with no Python frame (starting, ending, or in native code).
_PROCESS_FRAME = re.compile(r'^process \d+:"(?P<command>.*)"$')
# A child's command as shown: without the interpreter's path, at most this long.
COMMAND_SHOWN_CHARS = 60
NO_PYTHON_FRAME = "<no Python frame>"
# Sampled seconds this many times the CPU seconds: the run queue, not work (module doc).
SAMPLED_OVER_CPU_FLAGGED = 1.5


class ProfilerUnavailableError(BenchError):
    """`--profile` was asked for but no py-spy executable was found (`make build` installs it
    with the dev extra)."""

    searched: str  # the places looked in

    def __init__(self, searched: str) -> None:
        super().__init__(f"--profile needs py-spy, found neither beside {sys.executable} nor on "
                         f"PATH ({searched}); `make build` installs it (pyproject's dev extra)")
        self.searched = searched


@dataclass(frozen=True)
class ProcessProfile:
    """One process's profile: its file and where its samples ended."""

    name: str
    pid: int
    path: Path
    samples: int
    rate_hz: int
    self_samples: tuple[tuple[str, int], ...]  # (function, samples as the leaf), most first
    error: str | None = None  # why there is no profile (py-spy's last words), else None
    # (command of the innermost process, samples), most first: the query service's samples
    # fall in its driver, the pyspark daemon and its forked workers (`--subprocesses`)
    by_command: tuple[tuple[str, int], ...] = ()

    @property
    def sampled_s(self) -> float:
        return self.samples / self.rate_hz

    def as_json(self, top: int = TOP_FUNCTIONS_SHOWN) -> dict:
        return {"pid": self.pid, "file": str(self.path), "samples": self.samples,
                "sampled_s": round(self.sampled_s, 2), "error": self.error,
                "self_s_top": [[function, round(count / self.rate_hz, 2)]
                               for function, count in self.self_samples[:top]],
                "by_command_s": [[command, round(count / self.rate_hz, 2)]
                                 for command, count in self.by_command]}


def find_py_spy() -> str:
    """The py-spy executable: the one installed beside this interpreter (the venv's bin), else
    the first on PATH."""
    beside = Path(sys.executable).parent
    found = shutil.which(PY_SPY, path=str(beside)) or shutil.which(PY_SPY)
    if found is None:
        raise ProfilerUnavailableError(str(beside))
    return found


def function_of(frame: str) -> str:
    """A frame without its line number: `encode (common/kaska/protocol.py)`."""
    if _PROCESS_FRAME.match(frame):
        return NO_PYTHON_FRAME
    return _LINE_NUMBER.sub(")", frame)


def command_of(frame: str) -> str | None:
    """The command of a process frame, shortened (`-m pyspark.daemon pyspark.worker`), or None
    for a frame of a function."""
    match = _PROCESS_FRAME.match(frame)
    if match is None:
        return None
    command = match["command"]
    words = command.split(" ", 1)
    if len(words) == 2 and "python" in Path(words[0]).name:
        command = words[1]  # the same interpreter everywhere: its path says nothing
    return command[:COMMAND_SHOWN_CHARS]


def self_samples(collapsed: str) -> tuple[int, Counter[str], Counter[str]]:
    """From collapsed stacks: the total samples, each function's samples as the leaf (its self
    time), and each innermost process command's samples (empty without process frames). A stack
    of a process frame alone counts as NO_PYTHON_FRAME."""
    total, leaves, commands = 0, Counter(), Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue  # blank or not a stack line
        samples = int(count)
        total += samples
        frames = stack.split(";")
        leaves[function_of(frames[-1])] += samples
        innermost = [c for c in map(command_of, frames) if c is not None][-1:]
        if innermost:
            commands[innermost[0]] += samples
    return total, leaves, commands


def summarize(name: str, pid: int, path: Path, rate_hz: int, error: str | None) -> ProcessProfile:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    total, leaves, commands = self_samples(text)
    return ProcessProfile(name, pid, path, total, rate_hz, tuple(leaves.most_common()), error,
                          tuple(commands.most_common()))


def format_summary(name: str, profile: dict, cpu_s: float | None = None) -> list[str]:
    """Lines for the report from a profile's JSON (ProcessProfile.as_json, what the benchmark's
    result keeps): the process's CPU seconds (measured apart, from /proc) beside the seconds
    py-spy sampled in Python, then its top functions by self time."""
    cpu = f"{cpu_s:.1f} CPU-s, " if cpu_s is not None else ""
    if profile["samples"] == 0:
        reason = profile["error"] or "no samples (idle, or py-spy saw no Python)"
        return [f"  {name} (pid {profile['pid']}): {cpu}no profile: {reason}"]
    lines = [f"  {name} (pid {profile['pid']}): {cpu}{profile['sampled_s']:.1f} s sampled "
             f"in Python ({profile['samples']:,} samples, {profile['file']})"]
    if cpu_s is not None and profile["sampled_s"] > SAMPLED_OVER_CPU_FLAGGED * cpu_s:
        lines.append("    (sampled > CPU: threads waiting for a CPU were sampled too, see "
                     "scripts/bench/profile.py; --profile-gil counts only Python's own work)")
    by_command = profile.get("by_command_s", [])
    if len(by_command) > 1:
        lines.append("    by process: " + "; ".join(f"{command} {seconds:.2f} s"
                                                    for command, seconds in by_command))
    for function, seconds in profile["self_s_top"]:
        share_percent = 100 * seconds / profile["sampled_s"]
        lines.append(f"    {seconds:7.2f} s {share_percent:5.1f} %  {function}")
    return lines


class SessionProfiler:
    """py-spy on each attached process until the block ends; `profiles` afterwards."""

    def __init__(self, out_dir: Path, rate_hz: int = RATE_HZ_DEFAULT, gil: bool = False,
                 py_spy: str | None = None) -> None:
        assert rate_hz > 0, rate_hz
        self.out_dir = out_dir
        self.rate_hz = rate_hz
        self.gil = gil
        self.py_spy = py_spy or find_py_spy()
        self.profiles: dict[str, ProcessProfile] = {}
        self._running: dict[str, tuple[int, subprocess.Popen, Path, Path]] = {}

    def attach(self, name: str, pid: int) -> None:
        """Start sampling `pid` (and its Python children) into OUT_DIR/NAME.txt."""
        assert name not in self._running, name
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path, log = self.out_dir / f"{name}.txt", self.out_dir / f"{name}.py-spy.log"
        argv = [self.py_spy, "record", "--pid", str(pid), "--format", "raw", "--nonblocking",
                "--subprocesses", "--rate", str(self.rate_hz), "--output", str(path),
                *(["--gil"] if self.gil else [])]
        with open(log, "wb") as log_file:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT)
        self._running[name] = (pid, process, path, log)

    def __enter__(self) -> SessionProfiler:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGINT to every py-spy still sampling (it then writes its file), wait, summarize."""
        for _pid, process, _path, _log in self._running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for name, (pid, process, path, log) in self._running.items():
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()  # our own child: its file is lost, the summary says so
                process.wait()
            error = None if path.exists() else _last_words(log)
            self.profiles[name] = summarize(name, pid, path, self.rate_hz, error)
        self._running.clear()


def _last_words(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error")]
    return (errors or lines or [f"py-spy wrote nothing ({log})"])[0].strip()
