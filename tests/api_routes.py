"""The app's HTTP routes as tests walk them: (method, full path, route) for every APIRoute, with
the prefixes of the routers they were included from (FastAPI keeps included routers nested)."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts


def http_routes(app: FastAPI) -> Iterator[tuple[str, str, APIRoute]]:
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            for method in sorted(route.methods):
                yield method, context.path, route
