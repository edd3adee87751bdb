"""Signed read-only status requests: the status page asks the health checkers for their view
with the secret they share for their election packets (healthchecker/transport.py).

A request carries one header, `X-Flights-Status-Auth: t=<ms>,sig=<hex>`, where `ms` is the
sender's wall clock in milliseconds and `sig` is HMAC-SHA256(secret, "<METHOD> <path>\\n<ms>").
The server recomputes it and refuses a request whose signature does not match or whose clock
is more than `age_s_max` away from its own (the deployment's hosts share a clock, as for the
election packets). The requests are read-only, so a replay within that window reveals only
what the original request did; the answer is not encrypted (the checkers' network is the
deployment's own, as for /metrics).

Pure functions; thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac
import re

HEADER = "X-Flights-Status-Auth"
AGE_S_MAX_DEFAULT = 30.0
SECRET_BYTES_MAX = 4096
_VALUE = re.compile(r"^t=(\d{1,16}),sig=([0-9a-f]{64})$")


class StatusAuthError(Exception):
    """A status request whose authentication header is missing, malformed, forged or stale."""


def _signature(secret: bytes, method: str, path: str, sent_at_ms: int) -> str:
    message = f"{method.upper()} {path}\n{sent_at_ms}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _check_secret(secret: bytes) -> None:
    if not 0 < len(secret) <= SECRET_BYTES_MAX:
        raise StatusAuthError(f"the secret must hold 1..{SECRET_BYTES_MAX} bytes")


def sign(secret: bytes, method: str, path: str, now_s: float) -> str:
    """The header value for a request of `method` on `path` sent at wall clock `now_s`."""
    _check_secret(secret)
    sent_at_ms = round(now_s * 1000)
    return f"t={sent_at_ms},sig={_signature(secret, method, path, sent_at_ms)}"


def verify(secret: bytes, method: str, path: str, value: str | None, now_s: float,
           age_s_max: float = AGE_S_MAX_DEFAULT) -> None:
    """Raises `StatusAuthError` unless `value` signs this request within `age_s_max`."""
    _check_secret(secret)
    if value is None:
        raise StatusAuthError(f"no {HEADER} header")
    match = _VALUE.match(value.strip())
    if match is None:
        raise StatusAuthError(f"malformed {HEADER} header")
    sent_at_ms, signature = int(match.group(1)), match.group(2)
    expected = _signature(secret, method, path, sent_at_ms)
    if not hmac.compare_digest(signature, expected):
        raise StatusAuthError("the signature does not match (another secret?)")
    age_s = now_s - sent_at_ms / 1000
    if abs(age_s) > age_s_max:
        raise StatusAuthError(f"signed {age_s:.1f} s away from this clock (max {age_s_max:g})")
