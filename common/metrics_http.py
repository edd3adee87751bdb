"""The `--metrics-listen HOST:PORT` endpoint every service shares: parse the flag, serve one
registry in the Prometheus text format (`prometheus_client.make_wsgi_app`) and `/healthz`.

`/healthz` answers `200 ok` while the service's `HealthCheck` (common/liveness.py: its main
loops touched within `--healthz-stale-s`) finds no problem, else `503` and the one-line reason;
without a HealthCheck it answers `200 ok` while the endpoint serves. Every other path is the
metrics app's, as before (`/metrics`, `/`). One server: a small WSGI dispatcher on wsgiref's
server, threaded like `prometheus_client.start_http_server`'s (one daemon thread per request).

Each service builds its own `CollectorRegistry` (never the library's global default), so tests
can hold several services' registries in one process and a service exports only its own
metrics. The server runs on daemon threads of its own (one per request) and only reads: a
service's collectors must be safe to call from any thread.

No `_created` series: starting an endpoint turns them off process-wide
(`prometheus_client.disable_created_metrics`), so a service's `Histogram`s export only their
buckets, count and sum, in the text and the OpenMetrics formats alike.

Off when the flag is absent: `MetricsEndpoint.start_optional(None, ...)` returns None.
"""

from __future__ import annotations

import argparse
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, disable_created_metrics, make_wsgi_app

from common.address import AddressError, parse_host_port
from common.liveness import HealthCheck

log = logging.getLogger(__name__)

FLAG = "--metrics-listen"
HEALTHZ_PATH = "/healthz"


class MetricsListenError(ValueError):
    """A `--metrics-listen` value that is not HOST:PORT with a port in 0..65535."""

    value: str  # the text as given
    reason: str  # what is wrong with it

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"{value!r} is not HOST:PORT: {reason} (e.g. 127.0.0.1:9400)")
        self.value = value
        self.reason = reason


class MetricsBindError(Exception):
    """The metrics endpoint could not listen (address taken, host unknown, ...)."""

    host: str
    port: int
    cause: OSError

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(f"cannot serve /metrics on {host}:{port} ({FLAG}): {cause}")
        self.host = host
        self.port = port
        self.cause = cause


def parse_metrics_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:9400' -> ('127.0.0.1', 9400); '[::1]:9400' -> ('::1', 9400). Port 0 picks
    any free port (read it back from `MetricsEndpoint.address`)."""
    try:
        return parse_host_port(text)
    except AddressError as exc:
        raise MetricsListenError(text, exc.reason) from None


def metrics_listen_arg(text: str) -> tuple[str, int]:
    """`parse_metrics_listen` as an argparse type: a bad value exits 2 naming the flag."""
    try:
        return parse_metrics_listen(text)
    except MetricsListenError as error:
        raise argparse.ArgumentTypeError(f"{type(error).__name__}: {error}") from error


def health_app(metrics_app, health: HealthCheck | None):
    """A WSGI app: GET /healthz answered from `health`, anything else by `metrics_app`."""

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTHZ_PATH:
            return metrics_app(environ, start_response)
        problem = None if health is None else health.problem()
        status = "200 OK" if problem is None else "503 Service Unavailable"
        body = ("ok" if problem is None else problem).encode() + b"\n"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body)))])
        return [body]

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight never holds up the process's exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's signature
        """No access log: Prometheus and the healthchecks would flood the service's log."""


def _server_class(host: str, port: int) -> type[_ThreadingServer]:
    """A server class of the address family `host` resolves to (IPv6 hosts included)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    return type("_FamilyServer", (_ThreadingServer,), {"address_family": family})


class MetricsEndpoint:
    """`/metrics` of one registry and `/healthz` of one HealthCheck on HOST:PORT. start()
    binds (MetricsBindError when it cannot); stop() closes the socket, so a test may start
    and stop many in one process."""

    def __init__(self, listen: tuple[str, int], registry: CollectorRegistry,
                 health: HealthCheck | None = None) -> None:
        self.listen = listen
        self.registry = registry
        self.health = health
        self._server = None
        self._thread = None

    @classmethod
    def start_optional(cls, listen: tuple[str, int] | None, registry_factory,
                       health: HealthCheck | None = None) -> MetricsEndpoint | None:
        """Started on `listen`, or None when the flag was absent (the registry is then never
        built: no collector runs in a service that exports nothing)."""
        if listen is None:
            return None
        return cls(listen, registry_factory(), health).start()

    def start(self) -> MetricsEndpoint:
        host, port = self.listen
        disable_created_metrics()  # read at each scrape: takes effect for every metric
        app = health_app(make_wsgi_app(self.registry), self.health)
        try:
            self._server = make_server(host, port, app, _server_class(host, port),
                                       handler_class=_QuietHandler)
        except OSError as error:
            raise MetricsBindError(host, port, error) from error
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="metrics-http")
        self._thread.start()
        log.info("serving Prometheus metrics on http://%s:%d/metrics (and %s)", *self.address,
                 HEALTHZ_PATH)
        return self

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "start() first"
        return self.listen[0], self._server.server_port

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None
