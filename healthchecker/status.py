"""A health checker's read-only status request: `GET /status` on `--status-listen HOST:PORT`,
signed with the checkers' shared secret (common/status_auth.py), answered with this checker's
view as JSON, for the status page (services/status):

    {"format": 1, "node_id": 1, "name": "healthchecker-1", "now_s": <wall clock>,
     "role": "leader", "leader_id": 1, "leader_since_s": <wall clock or null>,
     "elections_started": 1,
     "services": [{"name": "broker-1", "phase": "up", "since_age_s": 12.0,
                   "last_seen_age_s": 0.4, "restarts": 1, "last_restart_age_s": 30.1,
                   "cause": "", "restart_in_flight": false,
                   "last_heal_at_s": <wall clock or null>, "last_heal_s": 1.2 or null}, ...],
     "events": [{"at_s": <wall clock>, "kind": "death", "service": "broker-1",
                 "detail": "..."}, ...]}   (oldest first; kinds: healthchecker/journal.py)

Ages are seconds on this checker's monotonic clock; `*_at_s` are wall-clock epoch seconds.
A checker never lists itself (it does not supervise itself): its peers do.

`status_document` is a pure function of the node's snapshots (the election and supervision
states are immutable and replaced whole; the journal copies under its lock), so the server's
threads only read. The server is the standard library's `ThreadingHTTPServer`: one daemon
thread per request, each with a socket timeout, and answers of bounded size (the supervision
bounds its services, the journal its events).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common.status_auth import HEADER, StatusAuthError, verify
from healthchecker.journal import Heal, JournalEvent

FORMAT = 1
PATH = "/status"
REQUEST_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)


class StatusBindError(Exception):
    """The status endpoint could not listen (address taken, host unknown, ...)."""


def _age(now: float, at: float | None) -> float | None:
    return None if at is None else round(max(now - at, 0.0), 3)


def service_rows(records, heals: dict[str, Heal], now: float) -> list[dict]:
    rows = []
    for name, record in sorted(records.items()):
        heal = heals.get(name)
        rows.append({
            "name": name,
            "phase": record.phase.value,
            "since_age_s": _age(now, record.since),
            "last_seen_age_s": _age(now, record.last_seen_at),
            "restarts": record.restart_count,
            "last_restart_age_s": _age(now, record.last_restart_at),
            "cause": record.cause,
            "restart_in_flight": record.in_flight or record.peer_in_flight,
            "last_heal_at_s": None if heal is None else heal.at_s,
            "last_heal_s": None if heal is None else round(heal.heal_s, 3),
        })
    return rows


def event_rows(events: list[JournalEvent]) -> list[dict]:
    return [{"at_s": e.at_s, "kind": e.kind, "service": e.service, "detail": e.detail}
            for e in events]


def status_document(node, now: float, wall_now: float) -> dict:
    """The answer to a status request (module doc) from a HealthCheckerNode (duck-typed:
    `config`, `election_state`, `supervision_state`, `journal`, `leader_since_s`)."""
    election = node.election_state
    return {
        "format": FORMAT,
        "node_id": node.config.node_id,
        "name": node.config.name,
        "now_s": wall_now,
        "role": election.role.value,
        "leader_id": election.leader_id,
        "leader_since_s": node.leader_since_s,
        "elections_started": election.elections_started,
        "services": service_rows(node.supervision_state.records, node.journal.heals(), now),
        "events": event_rows(node.journal.events()),
    }


class _Handler(BaseHTTPRequestHandler):
    server: _StatusServer
    timeout = REQUEST_TIMEOUT_S  # a client that stalls mid-request loses its thread, not ours

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path != PATH:
            self._answer(HTTPStatus.NOT_FOUND, {"error": f"only {PATH} is served"})
            return
        try:
            verify(self.server.secret, "GET", PATH, self.headers.get(HEADER), time.time())
        except StatusAuthError as error:
            self._answer(HTTPStatus.FORBIDDEN, {"error": str(error)})
            return
        self._answer(HTTPStatus.OK, self.server.document())

    def _answer(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's signature
        log.debug("status request from %s: " + format, self.client_address[0], *args)


class _StatusServer(ThreadingHTTPServer):
    daemon_threads = True
    secret: bytes
    document: Callable[[], dict]


class StatusEndpoint:
    """`GET /status` of one node on `listen`; start() binds (StatusBindError when it cannot),
    stop() closes the socket."""

    def __init__(self, listen: tuple[str, int], secret: bytes,
                 document: Callable[[], dict]) -> None:
        self.listen = listen
        self._secret = secret
        self._document = document
        self._server: _StatusServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_node(cls, listen: tuple[str, int], secret: bytes, node) -> StatusEndpoint:
        return cls(listen, secret, lambda: status_document(node, node.clock(), time.time()))

    def start(self) -> StatusEndpoint:
        try:
            server = _StatusServer(self.listen, _Handler)
        except OSError as error:
            raise StatusBindError(f"cannot serve {PATH} on {self.listen[0]}:{self.listen[1]} "
                                  f"(--status-listen): {error}") from error
        server.secret = self._secret
        server.document = self._document
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="status-http",
                                        daemon=True)
        self._thread.start()
        log.info("serving the status request on http://%s:%d%s", *self.address, PATH)
        return self

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "start() first"
        return self.listen[0], self._server.server_address[1]

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None
