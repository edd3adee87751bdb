"""The pipeline benchmark's error: a run that cannot be counted. Its own module so that the
gate (result_gate.py) and the runs (pipeline.py) raise the same base without importing each
other."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A run that cannot be counted: a session failed, or two computations disagree."""
