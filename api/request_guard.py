"""Refusals before routing, for input every route would mishandle in its own way:

- a control character (NUL, CR, LF, ...) in the URL's path or query: no id, name or parameter of
  this API may contain one (Postgres text cannot even hold NUL);
- a JSON body that Python's parser reads, but not as the client meant: a key given twice in one
  object (the last one would silently win), an integer longer than Python converts (4,300
  digits) or arrays and objects nested deeper than the parser goes (its own errors would surface
  as a bare 400, or a 500 here).

Each is a 422 that names the place. Bodies that are not JSON at all are left to FastAPI (400
INVALID_JSON). Pure ASGI: the body is read once here (inside BodySizeLimit, so never more than
its limit) and handed on unchanged."""

from __future__ import annotations

import json
import re
import sys
from email.message import Message
from typing import Any
from urllib.parse import parse_qsl

from fastapi.responses import JSONResponse

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300


class _DuplicateKey(ValueError):
    pass


class _NumberTooLong(ValueError):
    pass


class _Pairs(list):
    """An object as its list of (key, value) pairs (the second, locating pass)."""


class _Digits(str):
    """An integer as its digits (the second, locating pass)."""


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey()
    return result


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _NumberTooLong()
    return int(digits)


def _locate(node: Any, path: str) -> tuple[str, str, str] | None:
    """(error, field, message) of the first duplicate key or over-long integer under ``node``."""
    if isinstance(node, _Pairs):
        seen = set()
        for key, value in node:
            if key in seen:
                field = f"{path}.{key}" if path else key
                return (
                    "DUPLICATE_JSON_KEY",
                    field,
                    f"the key {key!r} appears more than once in the same object: send it once",
                )
            seen.add(key)
            found = _locate(value, f"{path}.{key}" if path else key)
            if found:
                return found
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found = _locate(item, f"{path}.{index}" if path else str(index))
            if found:
                return found
    elif isinstance(node, _Digits) and len(node.lstrip("-")) > MAX_INT_DIGITS:
        return (
            "INVALID_JSON_NUMBER",
            path or "body",
            f"an integer of {len(node.lstrip('-')):,} digits; at most {MAX_INT_DIGITS:,} digits are accepted",
        )
    return None


_TOO_DEEP = ("JSON_TOO_DEEP", "body", "arrays and objects are nested too deeply to be read")


def json_body_problem(body: bytes) -> tuple[str, str, str] | None:
    """(error, field, message) when ``body`` is JSON with a duplicate key, an over-long integer or
    too deep a nesting; None when it is fine, or not JSON at all (FastAPI answers that)."""
    try:
        json.loads(body, object_pairs_hook=_strict_object, parse_int=_bounded_int)
        return None
    except (_DuplicateKey, _NumberTooLong):
        pass
    except RecursionError:
        return _TOO_DEEP
    except ValueError:  # not JSON, not UTF-8: FastAPI's own 400
        return None
    try:
        return _locate(json.loads(body, object_pairs_hook=_Pairs, parse_int=_Digits), "")
    except RecursionError:
        return _TOO_DEEP


def url_problem(scope: dict) -> tuple[str, str] | None:
    """(field, message) for a control character in the decoded path or query."""
    match = CONTROL.search(scope.get("path", ""))
    if match:
        return "path", f"the URL path contains the control character U+{ord(match.group()):04X}: no id or name has one"
    query = scope.get("query_string", b"").decode("latin-1")
    for key, value in parse_qsl(query, keep_blank_values=True):
        match = CONTROL.search(key) or CONTROL.search(value)
        if match:
            return (
                f"query.{CONTROL.sub('?', key)[:64]}",
                f"contains the control character U+{ord(match.group()):04X}: no parameter has one",
            )
    return None


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a Content-Type says JSON (``application/json``, ``application/*+json``, any
    parameters), as FastAPI decides whether to parse a body as JSON."""
    if not content_type:
        return False
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _is_json(scope: dict) -> bool:
    content_type = dict(scope.get("headers") or ()).get(b"content-type")
    return content_type is not None and is_json_media_type(content_type.decode("latin-1"))


def _refusal(error: str, field: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "detail": f"{field}: {message}", "errors": [{"field": field, "message": message}]}, 422
    )


class RequestGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        problem = url_problem(scope)
        if problem is not None:
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008, "reason": "VALIDATION_ERROR"})
            return await _refusal("VALIDATION_ERROR", *problem)(scope, receive, send)
        if scope["type"] != "http" or not _is_json(scope):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return await self.app(scope, _replay([message]), send)
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        found = json_body_problem(body) if body else None
        if found is not None:
            return await _refusal(*found)(scope, receive, send)
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _replay(messages: list[dict], then=None):
    """A ``receive`` that hands out ``messages`` first, then defers to ``then`` (a disconnect)."""
    pending = list(messages)

    async def receive():
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
