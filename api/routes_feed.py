"""The Evolution Feed (evolution/feed.py): ``GET /api/feed`` reads the capped stream
``feed:stream`` page by page; ``WS /ws/feed`` pushes each new message (optionally replaying
those after ``?after=`` first). Both serve the same JSON objects, each with its stream ``id``."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Query, Request, Response, WebSocket
from redis.exceptions import RedisError
from starlette.websockets import WebSocketDisconnect

from api.errors import invalid_field, unavailable
from api.paging import Cursor, Keyset, paged
from api.schemas import ErrorResponse
from api.schemas_evolution import FeedResponse
from evolution import feed
from genesis.redis_keys import FEED_STREAM

router = APIRouter(tags=["evolution"])
MAX_LIMIT = 500
CLOSE_POLICY_VIOLATION = 1008
BLOCK_MS = 1000


def _check_after(after: str | None) -> str | None:
    """``after`` if it is a stream id; else ValueError saying the expected form (never the value
    itself: it is the client's, of any length and content)."""
    if after is not None and not feed.is_stream_id(after):
        raise ValueError(f"must be {feed.STREAM_ID_FORM}")
    return after


def _stream_id(value: object) -> str:
    """A stream id inside a cursor (ValueError otherwise)."""
    if not isinstance(value, str) or not feed.is_stream_id(value):
        raise ValueError("not a stream id")
    return value


PAGES = Keyset("feed", _stream_id)  # (stream id,), oldest first


@router.get(
    "/api/feed",
    response_model=FeedResponse,
    responses=paged({422: {"model": ErrorResponse}, 503: {"model": ErrorResponse}}),
)
async def read_feed(
    request: Request,
    response: Response,
    after: str | None = Query(
        default=None, description="Stream id: messages after it (0-0: from the oldest); without it: the newest"
    ),
    limit: int = Query(default=50, ge=1, le=MAX_LIMIT),
    cursor: Cursor = None,
) -> dict:
    """At most ``limit`` messages, oldest first: those after ``after`` (``0-0``: from the oldest
    kept; the stream keeps about the last 1,000), or without it the newest ones. ``last_id`` is
    where to continue (pass it as ``after``); ``next_cursor`` is set while more messages than
    this page are already there (null: caught up)."""
    try:
        _check_after(after)
    except ValueError as exc:
        raise invalid_field("query.after", str(exc)) from exc
    if cursor is not None:
        if after is not None:
            raise invalid_field("query.cursor", "give either after or cursor, not both (a cursor says where to go on)")
        (after,) = PAGES.decode(cursor) or (None,)
    try:
        if after is None:
            messages, next_cursor = await feed.read(request.app.state.services.redis, None, limit), None
        else:
            rows = await feed.read(request.app.state.services.redis, after, limit + 1)
            messages, next_cursor = PAGES.page(
                request, response, rows, limit, lambda m: (m["id"],), replaces=("after",)
            )
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    return {"messages": messages, "last_id": messages[-1]["id"] if messages else after, "next_cursor": next_cursor}


@router.websocket("/ws/feed")
async def follow_feed(websocket: WebSocket, after: str | None = None) -> None:
    """One feed message per text frame, as ``GET /api/feed`` serves them. ``?after=<id>``
    replays the messages after that id first; without it only new messages are sent."""
    redis = websocket.app.state.services.redis
    try:
        after = _check_after(after)
    except ValueError as exc:
        await websocket.accept()
        await websocket.send_text(json.dumps({"error": "VALIDATION_ERROR", "detail": f"query.after: {exc}"}))
        await websocket.close(code=CLOSE_POLICY_VIOLATION, reason="VALIDATION_ERROR")
        return
    await websocket.accept()
    if after is None:  # from now on: the newest id as the start (XREAD '$' could miss one in between)
        newest = await redis.xrevrange(FEED_STREAM, count=1)
        after = newest[0][0].decode() if newest else "0-0"
    cursor: str = after

    async def push() -> None:
        nonlocal cursor
        while True:
            try:
                messages = await feed.wait_new(redis, cursor, block_ms=BLOCK_MS)
            except (RedisError, OSError):  # Redis away: keep the socket, try again
                await asyncio.sleep(1.0)
                continue
            for message in messages:
                await websocket.send_text(feed.dumps(message))
                cursor = message["id"]

    async def watch_client() -> None:
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass

    tasks = [asyncio.create_task(push()), asyncio.create_task(watch_client())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    try:
        await websocket.close()
    except (RuntimeError, WebSocketDisconnect, OSError):
        pass
