"""Prometheus metrics of the API: GET /metrics (outside /api: not part of the agents' API).

Requests are counted and timed by route *template* (``/api/mutations/{mutation_id}/status``, not
each id) and status code; a path no route matches is ``route="unmatched"`` so scanners cannot
grow the label set. One uvicorn worker per API process, so the default registry is the whole
story (no multiprocess mode)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

METRICS_PATH = "/metrics"
UNMATCHED = "unmatched"

REQUESTS = Counter("genesis_api_requests", "HTTP requests answered", ["method", "route", "status"])
REQUEST_SECONDS = Histogram(
    "genesis_api_request_duration_seconds",
    "Time to answer an HTTP request (to the end of the body)",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
PROPOSALS = Counter(
    "genesis_api_mutation_proposals",
    "Mutation proposals by outcome: accepted, or the error code of the refusal (RATE_LIMIT_EXCEEDED, "
    "TRAIT_EXISTS, VALIDATION_ERROR, API_KEY_REQUIRED, ...); source is single or batch (per item)",
    ["source", "outcome"],
)

CHECKS = Counter(
    "genesis_api_trait_checks",
    "Checks (POST /api/mutations/check) by outcome: passed, rejected, or the error code of the refusal "
    "(RATE_LIMIT_EXCEEDED, CHECK_TIMEOUT, ...)",
    ["outcome"],
)

router = APIRouter()


@router.get(METRICS_PATH, include_in_schema=False)
def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def count_proposal(source: str, outcome: str) -> None:
    PROPOSALS.labels(source, outcome).inc()


def count_check(outcome: str) -> None:
    CHECKS.labels(outcome).inc()


def route_template(scope: Scope) -> str:
    """The matched route's path template; found again for answers given before routing (413)."""
    route = scope.get("route")
    if route is None:
        app = scope.get("app")
        for candidate in getattr(getattr(app, "router", None), "routes", ()):
            match, _ = candidate.matches(scope)
            if match == Match.FULL:
                route = candidate
                break
    return getattr(route, "path", None) or UNMATCHED


class RequestMetrics:
    """ASGI middleware: count and time every HTTP request (WebSockets are long-lived: not timed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes every handler

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            labels = (scope["method"], route_template(scope), str(status))
            REQUESTS.labels(*labels).inc()
            REQUEST_SECONDS.labels(*labels).observe(time.perf_counter() - started)
