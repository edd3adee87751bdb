"""Configuration errors of the health checker: named, with a message that says what to fix.

They are `ValueError`s (so argparse-style callers may treat them as bad input) and never
`AssertionError`s: a bad value on the command line must fail the same under `python -O`.
"""

from __future__ import annotations

import math


class HealthCheckerConfigError(ValueError):
    """Base of every health-checker configuration error."""


def require_positive_s(error: type[HealthCheckerConfigError], field: str, value: float) -> None:
    """`value` must be a finite number of seconds above zero."""
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise error(f"{field} must be a positive, finite number of seconds, got {value!r}")


def require_non_negative_s(error: type[HealthCheckerConfigError], field: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise error(f"{field} must be a finite number of seconds >= 0, got {value!r}")


def require_int_at_least(
    error: type[HealthCheckerConfigError], field: str, value: int, minimum: int
) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise error(f"{field} must be an integer >= {minimum}, got {value!r}")
