"""LogTail: the new lines of some log files printed as they come, each prefixed with its
service name (a run's clients, while their sessions run).

Invariants: a line is printed once, and only once complete (a partial last line waits for its
newline); a file that does not exist yet is skipped until it does.
Threads: one caller at a time (the run's waiting loop).
"""

from __future__ import annotations

from pathlib import Path

from scripts.launcher import console


class LogTail:
    """Prints the new lines of some log files, prefixed with their service name."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.offsets = dict.fromkeys(paths, 0)

    def print_new(self) -> None:
        for name, path in self.paths.items():
            if not path.exists():
                continue
            with open(path, "rb") as file:
                file.seek(self.offsets[name])
                data = file.read()
            complete = data[:data.rfind(b"\n") + 1]
            self.offsets[name] += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                console.say(f"[{name}] {line}")
