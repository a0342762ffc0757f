"""Cursor paging, the same on every list endpoint: ``limit`` items per page, ``cursor`` to go on.
A page that is not the last carries ``next_cursor`` in its body and a ``Link: <…>; rel="next"``
header with the URL of the next page; on the last page ``next_cursor`` is null and there is no
``Link``.

A cursor holds the sort key of the last item handed out (keyset paging), and the next page
starts strictly after it: items added or removed during a walk never make it hand out an item
twice or skip one that stays. Cursors are opaque to clients (base64url JSON that names the list
it belongs to) and checked like any other input: one from another list, or one that was edited
into something else, is a 422 naming ``query.cursor``."""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import quote, urlencode

from fastapi import Query, Request, Response
from pydantic import Field

from api.errors import ApiError, Responses, invalid_field

CURSOR_MAX_CHARS = 512
CURSOR_FORM = re.compile(r"^[A-Za-z0-9_-]+$")
Item = TypeVar("Item")

Cursor = Annotated[
    str | None,
    Query(
        max_length=CURSOR_MAX_CHARS,
        description="Where to go on: the next_cursor of the previous page, unchanged (absent: the first page)",
    ),
]

# A list response's field: ``next_cursor: NextCursor = None``.
NextCursor = Annotated[
    str | None, Field(description="Pass it as ?cursor= to get the next page; null: this is the last page")
]

LINK_HEADER = {
    "Link": {
        "description": 'On every page but the last: `<URL of the next page>; rel="next"` (the same as next_cursor)',
        "schema": {"type": "string"},
    }
}


def paged(responses: Responses | None = None) -> Responses:
    """A list route's ``responses=``: its own, plus the Link header of its pages."""
    responses = dict(responses or {})
    responses[200] = {**responses.get(200, {}), "headers": LINK_HEADER}
    return responses


# What one part of a sort key may be: each takes the decoded JSON value, returns it typed, or
# raises ValueError.
def moment(value: Any) -> datetime:
    """A time with its zone, in UTC (what the database compares; a time that has no UTC
    equivalent, such as the first hour of year 1 east of Greenwich, is refused)."""
    if not isinstance(value, str):
        raise ValueError("not a time")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("a time without its zone")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError("a time out of range") from None


def number(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError("not a finite number")
    return float(value)


def whole(below: int) -> Callable[[Any], int]:
    """A whole number from 0 to ``below - 1`` (the range of the column it is compared with)."""

    def check(value: Any) -> int:
        if type(value) is not int or not 0 <= value < below:
            raise ValueError("not a whole number in range")
        return value

    return check


def text(pattern: str | re.Pattern) -> Callable[[Any], str]:
    form = re.compile(pattern)

    def check(value: Any) -> str:
        if not isinstance(value, str) or len(value) > CURSOR_MAX_CHARS or not form.fullmatch(value):
            raise ValueError("not a name of this list")
        return value

    return check


class Keyset:
    """The cursors of one list: its name and the parts of its sort key."""

    def __init__(self, list_name: str, *parts: Callable[[Any], Any]):
        self.list_name, self.parts = list_name, parts

    def encode(self, *key: Any) -> str:
        plain = [value.isoformat() if isinstance(value, datetime) else value for value in key]
        payload = json.dumps([self.list_name, *plain], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(payload).decode().rstrip("=")

    def decode(self, cursor: str | None) -> tuple | None:
        """The sort key after which the page starts (None: the first page); 422 for anything but
        a cursor this list handed out."""
        if cursor is None:
            return None
        try:
            if not CURSOR_FORM.match(cursor):
                raise ValueError
            data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        except ValueError:
            raise _bad_cursor("not a cursor this API handed out") from None
        if not isinstance(data, list) or not data or not isinstance(data[0], str):
            raise _bad_cursor("not a cursor this API handed out")
        if data[0] != self.list_name:
            raise _bad_cursor(f"a cursor of another list; this one is {self.list_name}")
        if len(data) != 1 + len(self.parts):
            raise _bad_cursor("not a cursor this API handed out")
        try:
            return tuple(part(value) for part, value in zip(self.parts, data[1:], strict=True))
        except ValueError:
            raise _bad_cursor("not a cursor this API handed out") from None

    def page(
        self,
        request: Request,
        response: Response,
        rows: Sequence[Item],
        limit: int,
        key: Callable[[Item], tuple],
        replaces: Sequence[str] = (),
    ) -> tuple[list[Item], str | None]:
        """``rows`` fetched with ``limit + 1``: the page, and the cursor of the next one (None on
        the last page), which also goes into the response's Link header. ``replaces``: query
        parameters the cursor takes the place of in the next page's URL."""
        if len(rows) <= limit:
            return list(rows), None
        page = list(rows[:limit])
        cursor = self.encode(*key(page[-1]))
        response.headers["Link"] = f'<{next_url(request, cursor, replaces)}>; rel="next"'
        return page, cursor


def next_url(request: Request, cursor: str, replaces: Sequence[str] = ()) -> str:
    """This request's path and query with ``cursor`` set (relative: no Host header goes into it)."""
    dropped = {"cursor", *replaces}
    query = [(name, value) for name, value in request.query_params.multi_items() if name not in dropped]
    return f"{quote(request.url.path)}?{urlencode([*query, ('cursor', cursor)])}"


def _bad_cursor(why: str) -> ApiError:
    return invalid_field("query.cursor", f"{why}: pass the next_cursor of the previous page unchanged")
