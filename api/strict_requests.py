"""A request uses what its route declares, or is told exactly what is wrong:

- a query parameter the route does not declare is a 422 naming it and the ones the route
  accepts (a misspelt ``?limt=5`` would otherwise be ignored, and the answer look right);
- a body sent to a route that reads JSON, without ``Content-Type: application/json``, is a 415
  saying so (FastAPI would not parse it, and the error would blame the body's shape).

One dependency of the whole app (``create_app`` adds it to every route), reading the route's own
declarations. Routes outside the API's schema (the reference pages, the viewer's page, /metrics)
are left alone: browsers and scrapers add parameters of their own there. A WebSocket with an
unknown parameter gets one error frame and close code 1008, as its other parameter errors do."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi import WebSocketException
from fastapi.dependencies.models import Dependant
from starlette.requests import HTTPConnection, Request
from starlette.websockets import WebSocket

from api.errors import ApiError
from api.request_guard import is_json_media_type

CLOSE_POLICY_VIOLATION = 1008
MAX_NAME_CHARS = 64  # of a client's parameter name quoted back
MAX_NAMES_REPORTED = 10
FORM_ENCODED = "application/x-www-form-urlencoded"

# id(declaration) -> (the declaration, kept so that its id is never reused; its query parameters)
_accepted: dict[int, tuple[Any, tuple[str, ...]]] = {}


def accepted_query_parameters(declaration: Any) -> tuple[str, ...]:
    """The query parameters a route declares, its dependencies' included, sorted (by the name a
    client sends: a parameter's alias)."""
    known = _accepted.get(id(declaration))
    if known is None:
        known = _accepted[id(declaration)] = (declaration, tuple(sorted(_query_names(declaration.dependant))))
    return known[1]


def _query_names(dependant: Dependant) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _declaration(scope: Mapping[str, Any]) -> Any:
    """What the matched route declares: FastAPI's view of it as included (whose dependant has the
    dependencies of the routers that include it, and whose include_in_schema is theirs too), else
    the route itself."""
    context = scope.get("fastapi", {}).get("effective_route_context")
    return context if getattr(context, "dependant", None) is not None else scope.get("route")


async def check_declared_inputs(connection: HTTPConnection) -> None:
    declaration = _declaration(connection.scope)
    if declaration is None or not getattr(declaration, "include_in_schema", True):
        return
    accepted = accepted_query_parameters(declaration)
    unknown = sorted(set(connection.query_params) - set(accepted))
    if unknown:
        body = unknown_parameters_body(unknown, accepted)
        if isinstance(connection, WebSocket):
            await connection.accept()
            await connection.send_text(json.dumps({"event": "Error", **body}))
            raise WebSocketException(CLOSE_POLICY_VIOLATION, body["error"])
        raise ApiError(422, body.pop("error"), body.pop("detail"), extra=body)
    if isinstance(connection, Request) and getattr(connection.scope.get("route"), "body_field", None) is not None:
        await _check_json_body(connection)


def unknown_parameters_body(unknown: list[str], accepted: tuple[str, ...]) -> dict[str, Any]:
    """The 422 body for query parameters a route does not declare: each one named (shortened
    when long), with the parameters it does accept."""
    takes = f"this endpoint accepts {', '.join(accepted)}" if accepted else "this endpoint takes no query parameters"
    errors = [
        {"field": f"query.{_shown(name)}", "message": f"unknown query parameter; {takes}"}
        for name in unknown[:MAX_NAMES_REPORTED]
    ]
    more = len(unknown) - MAX_NAMES_REPORTED
    detail = "; ".join(f"{e['field']}: unknown query parameter" for e in errors) + (
        f" (and {more} more)" if more > 0 else ""
    )
    return {
        "error": "VALIDATION_ERROR",
        "detail": f"{detail}; {takes}",
        "errors": errors,
        "accepted_parameters": list(accepted),
    }


def _shown(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "…"


async def _check_json_body(request: Request) -> None:
    """415 for a body that is not declared as JSON (an empty body is left to the route: some take
    none, and the others say that theirs is missing)."""
    content_type = request.headers.get("content-type")
    if is_json_media_type(content_type) or not await request.body():
        return
    if not content_type:
        said = "the request has no Content-Type header"
    else:
        said = f"the request says Content-Type: {_shown(content_type)}"
        if content_type.split(";")[0].strip().lower() == FORM_ENCODED:
            said += " (what curl -d sends unless given -H 'Content-Type: application/json')"
    raise ApiError(
        415,
        "UNSUPPORTED_MEDIA_TYPE",
        f"the body must be JSON: send it with the header Content-Type: application/json; {said}",
    )
