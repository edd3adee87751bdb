"""The replication benchmark's kernel profiles (scripts/bench/kernel_profile.py): the summary
parsed from `perf report` texts, a profiler's records of process trees (a fake `perf`), and
a machine without perf."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.bench import kernel_profile
from scripts.bench.errors import BenchError
from scripts.bench.kernel_profile import (
    KernelProfiler,
    KernelProfilerUnavailableError,
    find_perf,
    parse_summary,
)

# Trimmed from a real `perf report --stdio -g none --children --sort sym` of a follower during
# the spread rounds: the page-fault entry, a zeroing function under it, two system calls.
WITH_CALLEES = """\
# Samples: 10K of event 'cpu-clock:ppp'
# Event count (approx.): 5368683000
#
# Children      Self  Symbol
# ........  ........  .......................................
#
    65.92%     3.77%  [.] __memmove_avx512_unaligned_erms
    63.44%     0.00%  [k] asm_exc_page_fault
    52.31%    52.15%  [k] __pi_memset
     8.94%     0.00%  [k] __x64_sys_recvfrom
     1.10%     0.45%  [k] clear_page_erms
     0.63%     0.00%  [k] __x64_sys_fsync
     7.30%     7.31%  [.] _blake3_hash_many_avx512
"""
# ... and `perf report --stdio -g none --no-children -n --sort dso` of the same file.
BY_OBJECT = """\
# Samples: 10K of event 'cpu-clock:ppp'
#
# Overhead       Samples  Shared Object
# ........  ............  .......................................
#
    77.07%          8271  [kernel.kallsyms]
     8.09%           868  libpython3.11.so.1.0
     7.53%           808  blake3.cpython-311-x86_64-linux-gnu.so
     5.40%           579  libc.so.6
     1.66%           178  _crc32c.cpython-311-x86_64-linux-gnu.so
"""


def test_summary_reads_faults_zeroing_syscalls_and_objects():
    profile = parse_summary("follower", Path("f.data"), 2000, WITH_CALLEES, BY_OBJECT)

    assert profile.samples == 8271 + 868 + 808 + 579 + 178  # exact, not perf's "10K"
    assert profile.sampled_cpu_s == pytest.approx(10704 / 2000)
    assert profile.page_faults_pct == 63.44
    assert profile.zero_fill_pct == pytest.approx(52.15 + 0.45)  # self time: no double count
    assert profile.syscalls_pct == (("recvfrom", 8.94), ("fsync", 0.63))
    assert profile.objects_pct[:3] == (("kernel", 77.07), ("libpython3.11", 8.09),
                                       ("blake3", 7.53))
    assert ("_crc32c", 1.66) in profile.objects_pct
    line = profile.line()
    assert "page faults 63% (zeroing fresh pages 53%)" in line
    assert "recvfrom 9%" in line and "blake3 8%" in line


def test_empty_reports_give_an_empty_summary():
    profile = parse_summary("idle", Path("i.data"), 999, "# nothing\n", "# nothing\n")

    assert profile.samples == 0
    assert profile.page_faults_pct == profile.zero_fill_pct == 0.0
    assert profile.syscalls_pct == profile.objects_pct == ()


def test_no_perf_on_path_is_a_named_error(monkeypatch):
    monkeypatch.setattr(kernel_profile.shutil, "which", lambda _name: None)

    with pytest.raises(KernelProfilerUnavailableError, match="needs Linux perf"):
        find_perf()


def _fake_perf(directory: Path) -> None:
    """A `perf` that records (noting its arguments) from the `enable` on its control fifo,
    acknowledged, until SIGINT, and reports the texts above."""
    script = directory / "perf"
    script.write_text(f"""#!{sys.executable}
import signal, sys
args = sys.argv[1:]
if args[0] == "record":
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    control, ack = args[args.index("--control") + 1].removeprefix("fifo:").split(",")
    with open(control) as commands:
        assert commands.readline() == "enable\\n"
    with open(args[args.index("-o") + 1], "w") as out:
        out.write(" ".join(args))
    with open(ack, "w") as answers:
        answers.write("ack\\n")
    while True:
        signal.pause()  # until the profiler's SIGINT
print({WITH_CALLEES!r} if "--children" in args else {BY_OBJECT!r})
""")
    script.chmod(0o755)


def test_profiler_records_each_tree_until_stopped_and_summarises(tmp_path, monkeypatch):
    _fake_perf(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    me, parent = os.getpid(), os.getppid()

    with KernelProfiler(tmp_path / "out", rate_hz=2000) as profiler:
        profiler.start("query-service", [me, ended.pid, parent])
        profiler.start("client", parent)

    assert sorted(profiler.profiles) == ["client", "query-service"]
    recorded = (tmp_path / "out" / "query-service.perf.data").read_text()
    assert f"-p {me},{parent}" in recorded  # the process that ended is left out
    assert "-F 2000" in recorded and "-g" in recorded.split()
    assert "-D -1" in recorded  # sampling off until the profiler enabled it
    assert f"-p {parent}" in (tmp_path / "out" / "client.perf.data").read_text()
    assert profiler.profiles["client"].page_faults_pct == 63.44
    assert not list((tmp_path / "out").glob("*.control"))  # the fifos are gone


def test_a_perf_that_cannot_attach_is_a_clear_error(tmp_path, monkeypatch):
    script = tmp_path / "perf"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      "print('Error: No permission to enable cpu-clock event.')\nsys.exit(255)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    with pytest.raises(BenchError, match="did not start recording broker-1.*No permission"):
        KernelProfiler(tmp_path / "out").start("broker-1", 4242)
