"""The web app (Starlette, served by uvicorn): `/` the self-refreshing HTML page, `/api/status`
the same document as JSON (model.py), `/healthz`: 200 `ok` once a first poll has completed
while the poller's loop goes round (503 and why otherwise: common/liveness.py), `/metrics` the
page's own process (CPU, memory, open files) and each session's fold backlog
(session_metrics.py) for the deployment's Prometheus.

The app only renders the poller's latest document: a slow or dead service never slows a page
view, and any number of viewers cost one poll per interval.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from common.liveness import STALE_AFTER_S_DEFAULT, HealthCheck, Liveness
from services.status.plot import sparkline_svg
from services.status.session_metrics import SessionBacklogCollector

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
NOT_READY = "collecting the first status, retry in a second"


def format_age(seconds: float | None) -> str:
    """'0.4 s', '12 s', '3 min 5 s'; '–' for unknown."""
    if seconds is None:
        return "–"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def format_clock(at_s: float | None) -> str:
    """Local wall-clock time of an epoch-seconds instant, '–' for unknown."""
    if at_s is None:
        return "–"
    return dt.datetime.fromtimestamp(at_s).strftime("%H:%M:%S")


def templates() -> Jinja2Templates:
    found = Jinja2Templates(directory=str(TEMPLATES_DIR))
    found.env.filters["age"] = format_age
    found.env.filters["clock"] = format_clock
    return found


def create_app(document: Callable[[], dict | None],
               loops: Iterable[Liveness] = (),
               stale_after_s: float = STALE_AFTER_S_DEFAULT) -> Starlette:
    """`document()`: the latest status document, None before the first poll; `loops`: the
    poller's progress, for /healthz."""
    pages = templates()
    health = HealthCheck(lambda: loops, stale_after_s,
                         ready=lambda: None if document() is not None else NOT_READY)

    async def page(request: Request) -> Response:
        doc = document()
        if doc is None:
            return HTMLResponse(f"<meta http-equiv='refresh' content='1'><p>{NOT_READY}</p>",
                                status_code=503)
        plot = sparkline_svg([tuple(point) for point in doc["upload_batches_per_s"]],
                             "batches uploaded per second")
        return pages.TemplateResponse(request, "status.html", {
            "doc": doc, "plot": plot,
            "refresh_s": max(1, math.ceil(doc["refresh_interval_s"]))})

    async def api(request: Request) -> Response:
        doc = document()
        if doc is None:
            return JSONResponse({"error": NOT_READY}, status_code=503)
        return JSONResponse(doc)

    async def healthz(request: Request) -> Response:
        problem = health.problem()
        return PlainTextResponse("ok" if problem is None else problem,
                                 status_code=200 if problem is None else 503)

    registry = process_registry()
    registry.register(SessionBacklogCollector(document))

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/", page), Route("/api/status", api),
                             Route("/healthz", healthz), Route("/metrics", metrics)])


def process_registry() -> CollectorRegistry:
    """The page's own registry (never the library's global one): its process's collectors."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry
