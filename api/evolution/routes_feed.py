"""The Evolution Feed (evolution/feed.py): ``GET /api/feed`` reads the capped stream
``feed:stream`` page by page; ``WS /ws/feed`` pushes each new message (optionally replaying
those after ``?after=`` first). Both serve the same JSON objects, each with its stream ``id``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from fastapi import APIRouter, Query, Request, Response, WebSocket
from redis.exceptions import RedisError

from api.deps import FeedHubDep, RedisDep
from api.errors import ErrorResponse, invalid_field, unavailable
from api.evolution.schemas import FeedResponse
from api.fanout import Subscriber, pump
from api.paging import Cursor, Keyset, paged
from evolution import feed

router = APIRouter(tags=["evolution"])
MAX_LIMIT = 500
CLOSE_POLICY_VIOLATION = 1008
REPLAY_PAGE = 100


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
    redis: RedisDep,
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
            messages, next_cursor = await feed.read(redis, None, limit), None
        else:
            rows = await feed.read(redis, after, limit + 1)
            messages, next_cursor = PAGES.page(
                request, response, rows, limit, lambda m: (m["id"],), replaces=("after",)
            )
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    return {"messages": messages, "last_id": messages[-1]["id"] if messages else after, "next_cursor": next_cursor}


@router.websocket("/ws/feed")
async def follow_feed(websocket: WebSocket, redis: RedisDep, hub: FeedHubDep, after: str | None = None) -> None:
    """One feed message per text frame, as ``GET /api/feed`` serves them. ``?after=<id>``
    replays the messages after that id first; without it only new messages are sent."""
    try:
        after = _check_after(after)
    except ValueError as exc:
        await websocket.accept()
        await websocket.send_text(json.dumps({"error": "VALIDATION_ERROR", "detail": f"query.after: {exc}"}))
        await websocket.close(code=CLOSE_POLICY_VIOLATION, reason="VALIDATION_ERROR")
        return
    subscriber = hub.subscribe()  # before the replay: nothing published meanwhile is missed
    try:
        await websocket.accept()
    except Exception:
        hub.unsubscribe(subscriber)
        raise
    await pump(websocket, hub, subscriber, None if after is None else _replay(redis, after, subscriber))


def _replay(
    redis: aioredis.Redis, after: str, subscriber: Subscriber
) -> Callable[[Callable[[str], Awaitable[None]]], Awaitable[None]]:
    """Send the messages after ``after`` the stream still holds, then those the hub queued
    meanwhile that the replay has not sent already."""

    async def replay(send: Callable[[str], Awaitable[None]]) -> None:
        cursor = after
        while True:
            try:
                page = await feed.read(redis, after=cursor, limit=REPLAY_PAGE)
            except (RedisError, OSError):  # Redis away: the live messages still come
                break
            for message in page:
                await send(feed.dumps(message))
                cursor = message["id"]
            if len(page) < REPLAY_PAGE:
                break
        queued = []
        while not subscriber.queue.empty():
            queued.append(subscriber.queue.get_nowait())
        for text in queued:
            if feed.id_order(json.loads(text)["id"]) > feed.id_order(cursor):
                await send(text)

    return replay
