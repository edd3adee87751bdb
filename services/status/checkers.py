"""The health checkers' views, through their signed read-only status request
(healthchecker/status.py answers it; common/status_auth.py signs it).

`parse_checker_status` checks the answer's shape (a checker of another version, or something
else on that port, is an error, not a crash of the page); `fetch_checker_status` does the GET.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from common.status_auth import HEADER, sign

PATH = "/status"
FORMAT = 1
ANSWER_BYTES_MAX = 4 * 1024 * 1024
SERVICE_KEYS = {"name": str, "phase": str, "restarts": int, "restart_in_flight": bool}
EVENT_KEYS = {"at_s": (int, float), "kind": str, "service": str, "detail": str}


class CheckerUnreachableError(Exception):
    """The checker did not answer in time, refused the connection or refused the request."""


class MalformedCheckerStatusError(ValueError):
    """An answer that is not the status document of healthchecker/status.py."""


@dataclass(frozen=True)
class CheckerStatus:
    name: str  # as the page calls it (healthchecker-<i>)
    node_id: int
    role: str
    leader_id: int | None
    leader_since_s: float | None
    services: tuple[dict, ...]
    events: tuple[dict, ...]


def _require(doc: dict, key: str, types) -> object:
    value = doc.get(key)
    if not isinstance(value, types) or isinstance(value, bool) and types is not bool:
        raise MalformedCheckerStatusError(f"{key!r} is {value!r:.60}, not {types}")
    return value


def _optional_number(doc: dict, key: str) -> float | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, int | float):
        raise MalformedCheckerStatusError(f"{key!r} is {value!r:.60}, not a number")
    return value


def _rows(doc: dict, key: str, keys: dict) -> tuple[dict, ...]:
    rows = _require(doc, key, list)
    for row in rows:
        if not isinstance(row, dict):
            raise MalformedCheckerStatusError(f"an entry of {key!r} is not an object")
        for field, types in keys.items():
            _require(row, field, types)
    return tuple(rows)


def parse_checker_status(name: str, doc: object) -> CheckerStatus:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise MalformedCheckerStatusError(f"not a status document of format {FORMAT}")
    leader_id = doc.get("leader_id")
    if leader_id is not None and not isinstance(leader_id, int):
        raise MalformedCheckerStatusError(f"leader_id is {leader_id!r:.60}")
    return CheckerStatus(
        name=name,
        node_id=_require(doc, "node_id", int),
        role=_require(doc, "role", str),
        leader_id=leader_id,
        leader_since_s=_optional_number(doc, "leader_since_s"),
        services=_rows(doc, "services", SERVICE_KEYS),
        events=_rows(doc, "events", EVENT_KEYS),
    )


def fetch_checker_status(name: str, address: tuple[str, int], secret: bytes,
                         timeout_s: float) -> CheckerStatus:
    host, port = address
    request = urllib.request.Request(f"http://{host}:{port}{PATH}", headers={
        HEADER: sign(secret, "GET", PATH, time.time())})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            body = answer.read(ANSWER_BYTES_MAX + 1)
    except (OSError, urllib.error.URLError) as error:  # HTTPError is a URLError
        raise CheckerUnreachableError(f"{name} at {host}:{port}: {error}") from error
    if len(body) > ANSWER_BYTES_MAX:
        raise MalformedCheckerStatusError(f"{name}: answer over {ANSWER_BYTES_MAX} bytes")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedCheckerStatusError(f"{name}: not JSON: {error}") from error
    return parse_checker_status(name, doc)
