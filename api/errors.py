"""Every rejection says what was wrong: one error shape ``{"error", "detail"}`` for all 4xx/5xx
(``ErrorResponse``; a rate limit's 429 adds ``retry_after_sec``: ``RateLimitResponse``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from redis.exceptions import RedisError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("genesis.api")

# A route's `responses=`: status code -> its OpenAPI entry ({"model": ..., "description": ...}).
Responses = dict[int | str, dict[str, Any]]

# Postgres failing under a route that does not catch it itself (the server unreachable or
# restarting, a schema behind the code): 503 DATABASE_UNAVAILABLE like the routes that do, not a
# 500. Errors that point at a request or a bug (IntegrityError, DataError) stay 500s.
DATABASE_FAILURES = (
    sa_exc.OperationalError,
    sa_exc.ProgrammingError,
    sa_exc.InterfaceError,
    sa_exc.InternalError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)


class ErrorResponse(BaseModel):
    error: str
    detail: str
    errors: list[dict[str, Any]] | None = None


class RateLimitResponse(BaseModel):
    """429 of open-mutation-api.md; the Retry-After header carries the same number."""

    error: str = Field(examples=["RATE_LIMIT_EXCEEDED"])
    detail: str = Field(examples=["Too many active mutations for agent_id 'claude-external-1' (limit: 5)"])
    retry_after_sec: int


class ApiError(Exception):
    def __init__(
        self,
        status_code: int,
        error: str,
        detail: str,
        headers: dict[str, str] | None = None,
        extra: dict | None = None,
    ):
        super().__init__(detail)
        self.status_code, self.error, self.detail, self.headers = status_code, error, detail, headers
        self.extra = extra or {}  # more fields of the body, e.g. retry_after_sec of a 429


def unavailable(error: str, service: str, exc: BaseException, doing: str = "") -> ApiError:
    """503 for a dependency that failed: the exception goes to the API's log, the answer names
    only the service and the kind of failure (never a driver's message, which may carry SQL,
    addresses or stack details)."""
    log.warning("%s failed%s: %s: %s", service, f" ({doing})" if doing else "", type(exc).__name__, exc)
    return ApiError(
        503,
        error,
        f"{service} is unavailable{f' ({doing})' if doing else ''}: "
        f"{type(exc).__name__} (the API's log has the details)",
    )


def invalid_field(field: str, message: str, **extra: Any) -> ApiError:
    """422 VALIDATION_ERROR for one bad field or parameter, in the shape pydantic's errors get."""
    return ApiError(
        422,
        "VALIDATION_ERROR",
        f"{field}: {message}",
        extra={"errors": [{"field": field, "message": message}], **extra},
    )


def _field_name(loc: tuple) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def _describe(err: Mapping[str, Any]) -> str:
    message = err.get("msg", "invalid")
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if err.get("type") == "missing":
        message = "field required"
    elif err.get("type") == "extra_forbidden":
        message = "unknown field (not part of the request schema)"
    return f"{_field_name(err.get('loc', ()))}: {message}"


def validation_error_body(errors: Sequence[Mapping[str, Any]]) -> dict:
    """The 422 VALIDATION_ERROR body for pydantic errors: a detail naming each bad field."""
    simplified = [{"field": _field_name(e.get("loc", ())), "message": _describe(e).split(": ", 1)[-1]} for e in errors]
    return {"error": "VALIDATION_ERROR", "detail": "; ".join(_describe(e) for e in errors), "errors": simplified}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        body = {"error": exc.error, "detail": exc.detail, **exc.extra}
        return JSONResponse(body, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            ctx = next(e for e in errors if e.get("type") == "json_invalid").get("ctx", {})
            detail = f"request body is not valid JSON: {ctx.get('error', 'parse error')}"
            return JSONResponse({"error": "INVALID_JSON", "detail": detail}, 400)
        if any(e.get("loc") == ("body",) for e in errors):  # the body itself, not a nested object field
            return JSONResponse({"error": "INVALID_BODY", "detail": "request body must be a JSON object"}, 422)
        return JSONResponse(validation_error_body(errors), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            why = (
                "JSON must be UTF-8"
                if isinstance(exc.__cause__, UnicodeDecodeError)
                else f"{type(exc.__cause__).__name__ if exc.__cause__ else 'unreadable'}"
            )
            detail = f"request body is not valid JSON: it could not be decoded ({why})"
            return JSONResponse({"error": "INVALID_JSON", "detail": detail}, 400)
        error = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
        return JSONResponse({"error": error, "detail": str(exc.detail)}, exc.status_code)

    async def _database_failure(_: Request, exc: Exception) -> JSONResponse:
        error = unavailable("DATABASE_UNAVAILABLE", "Postgres", exc)  # logged there; uvicorn logs the path
        return JSONResponse({"error": error.error, "detail": error.detail}, error.status_code)

    for failure in DATABASE_FAILURES:
        app.add_exception_handler(failure, _database_failure)

    async def _redis_failure(_: Request, exc: Exception) -> JSONResponse:
        """Redis away on a route that does not answer for it itself: 503, as for Postgres."""
        error = unavailable("REDIS_UNAVAILABLE", "Redis", exc)
        return JSONResponse({"error": error.error, "detail": error.detail}, error.status_code)

    app.add_exception_handler(RedisError, _redis_failure)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        """A bug or an unforeseen failure: logged with its traceback, answered without it."""
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {"error": "INTERNAL_ERROR", "detail": "the request failed unexpectedly; the API's log has the details"}, 500
        )


def document_error_responses(app: FastAPI) -> None:
    """Make /openapi.json say what the handlers above answer for every operation: 400
    ``INVALID_JSON``, 413 ``PAYLOAD_TOO_LARGE`` and 415 ``UNSUPPORTED_MEDIA_TYPE`` wherever a body
    is read, and 422 everywhere (an unknown query parameter), in the ``ErrorResponse`` shape
    (FastAPI documents its own ``HTTPValidationError`` there, which this API never sends)."""
    generate = app.openapi
    ref = {"$ref": "#/components/schemas/ErrorResponse"}

    def error(description: str) -> dict:
        return {"description": description, "content": {"application/json": {"schema": dict(ref)}}}

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault(
            "ErrorResponse", ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        )
        for path_item in schema.get("paths", {}).values():
            for operation in path_item.values():
                responses = operation.setdefault("responses", {})
                if "requestBody" in operation:
                    responses.setdefault("400", error("INVALID_JSON: the body is not valid JSON (or not UTF-8)"))
                    responses.setdefault("413", error("PAYLOAD_TOO_LARGE: the body is over the size limit"))
                    responses.setdefault(
                        "415", error("UNSUPPORTED_MEDIA_TYPE: a body without Content-Type: application/json")
                    )
                validation = responses.get("422", {}).get("content", {}).get("application/json", {})
                if validation.get("schema", {}).get("$ref", "").endswith("/HTTPValidationError"):
                    responses["422"] = error("VALIDATION_ERROR: the detail and errors name each bad field")
                # every operation: a query parameter it does not declare (api/strict_requests.py)
                responses.setdefault("422", error("VALIDATION_ERROR: an unknown query parameter (the detail names it)"))
        for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's, now unreferenced
            rest = {key: value for key, value in components.items() if key != name}
            if f'#/components/schemas/{name}"' not in json.dumps([schema.get("paths"), rest]):
                components.pop(name, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


class BodySizeLimit:
    """Pure ASGI middleware: refuse bodies over ``max_bytes`` before they are buffered."""

    def __init__(self, app, max_bytes: int, per_path: dict[str, int] | None = None):
        self.app, self.max_bytes = app, max_bytes
        self.per_path = per_path or {}  # larger limits for some paths (the batch propose)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.per_path.get(scope.get("path", ""), self.max_bytes)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await self._too_large(send, int(declared), limit)
        received = 0

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge()
            return message

        try:
            await self.app(scope, counting_receive, send)
        except _BodyTooLarge:
            await self._too_large(send, received, limit)

    async def _too_large(self, send, size: int, limit: int) -> None:
        response = JSONResponse(
            {"error": "PAYLOAD_TOO_LARGE", "detail": f"request body is {size:,} bytes; the limit is {limit:,}"},
            413,
        )
        await send({"type": "http.response.start", "status": 413, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})


class _BodyTooLarge(Exception):
    pass
