"""The `--metrics-listen HOST:PORT` endpoint every service shares: parse the flag, serve one
registry in the Prometheus text format with `prometheus_client.start_http_server`.

Each service builds its own `CollectorRegistry` (never the library's global default), so tests
can hold several services' registries in one process and a service exports only its own
metrics. The server runs on daemon threads of its own (one per scrape) and only reads: a
service's collectors must be safe to call from any thread.

No `_created` series: starting an endpoint turns them off process-wide
(`prometheus_client.disable_created_metrics`), so a service's `Histogram`s export only their
buckets, count and sum, in the text and the OpenMetrics formats alike.

Off when the flag is absent: `MetricsEndpoint.start_optional(None, ...)` returns None.
"""

from __future__ import annotations

import argparse
import logging

from prometheus_client import CollectorRegistry, disable_created_metrics, start_http_server

from common.address import AddressError, parse_host_port

log = logging.getLogger(__name__)

FLAG = "--metrics-listen"


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


class MetricsEndpoint:
    """`/metrics` of one registry on HOST:PORT. start() binds (MetricsBindError when it cannot);
    stop() closes the socket, so a test may start and stop many in one process."""

    def __init__(self, listen: tuple[str, int], registry: CollectorRegistry) -> None:
        self.listen = listen
        self.registry = registry
        self._server = None
        self._thread = None

    @classmethod
    def start_optional(cls, listen: tuple[str, int] | None,
                       registry_factory) -> MetricsEndpoint | None:
        """Started on `listen`, or None when the flag was absent (the registry is then never
        built: no collector runs in a service that exports nothing)."""
        if listen is None:
            return None
        return cls(listen, registry_factory()).start()

    def start(self) -> MetricsEndpoint:
        host, port = self.listen
        disable_created_metrics()  # read at each scrape: takes effect for every metric
        try:
            self._server, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as error:
            raise MetricsBindError(host, port, error) from error
        log.info("serving Prometheus metrics on http://%s:%d/metrics", *self.address)
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
