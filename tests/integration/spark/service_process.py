"""The query service as a child process (`python -m spark.service`), in its own process group
so that a kill -9 takes its Spark JVM along, as `docker kill` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from common.flights.session_records import decode
from common.kaska.range_reader import RangeReader

REPO = Path(__file__).resolve().parents[3]


class ServiceProcess:
    def __init__(self, brokers: str, log_path: Path, *extra_args: str) -> None:
        self.brokers = brokers
        self.log_path = log_path
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServiceProcess:
        command = [sys.executable, "-m", "spark.service", "--brokers", self.brokers,
                   "--master", "local[2]", "--shuffle-partitions", "2", "--driver-memory", "1g",
                   # No warm-up job (these tests time nothing; run_local's tests keep it on).
                   "--warm-up-rows", "0", *self._state_dir_args(), *self.extra_args]
        env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log,
                                         start_new_session=True)
        return self

    def _state_dir_args(self) -> list[str]:
        """The fold state beside the log, the same for every start of this service (a restart
        resumes from it), unless the test names one."""
        if "--state-dir" in self.extra_args:
            return []
        return ["--state-dir", str(self.log_path.with_name(self.log_path.name + ".state"))]

    def kill9(self) -> None:
        """SIGKILL the service and everything it started (its Spark JVM, Python workers)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone
        self.proc.wait(30)

    def terminate(self, timeout_s: float) -> tuple[int, float]:
        """SIGTERM the service process alone; (exit code, seconds it took)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        return code, time.monotonic() - started

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, nbytes: int = 4000) -> str:
        return self.log_path.read_bytes()[-nbytes:].decode(errors="replace")

    def log_lines(self, needle: str) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if needle in line]


def topic_records(brokers: str, topic: str) -> list:
    """Every control record of partition 0 of `topic`, decoded, in offset order."""
    with RangeReader(brokers, retry_deadline_s=10.0) as reader:
        _, end = reader.offsets(topic, 0)
        return [decode(record.value) for record in reader.read(topic, 0, 0, end)]
