"""The one error of the launcher's parts."""

from __future__ import annotations


class RunLocalError(Exception):
    """The platform could not be started (a service never became ready)."""
