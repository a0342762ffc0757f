"""The Evolution Feed: one human-readable message per step of an evolution cycle (and of the
Watcher, the engine and the mutation lifecycle).

``publish`` XADDs the message to the capped stream ``feed:stream`` (MAXLEN ~ 1000, so a reader
can catch up: ``GET /api/feed?after=<id>``) and PUBLISHes the same JSON on ``ch:feed`` (live
followers: ``WS /ws/feed``). Every message has the same keys: ``agent``, ``action``,
``message``, ``trigger_id``, ``mutation_id``, ``workflow_id``, ``timestamp``; extra fields
(``problem_type``, ``severity``, ...) may follow."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from genesis.redis_keys import FEED_STREAM, FEED_STREAM_MAXLEN, Channels

# The actions of the evolution cycle; other agents add their own (trait_quarantined, ...).
ACTIONS = (
    "anomaly_detected",
    "plan_created",
    "code_generated",
    "validation_failed",
    "mutation_applied",
    "rolled_back",
    "llm_error",
    "circuit_breaker_activated",
    "cycle_failed",
    "cycle_completed",
    "params_adjusted",
)
ID_FIELDS = ("trigger_id", "mutation_id", "workflow_id")


def message(
    agent: str,
    action: str,
    text: str,
    *,
    trigger_id: str | None = None,
    mutation_id: str | None = None,
    workflow_id: str | None = None,
    timestamp: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A feed message in the contract's shape (ids default to null)."""
    return {
        "agent": agent,
        "action": action,
        "message": text,
        "trigger_id": trigger_id,
        "mutation_id": mutation_id,
        "workflow_id": workflow_id,
        "timestamp": round(time.time() if timestamp is None else timestamp, 3),
        **extra,
    }


def dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)


async def publish(redis: aioredis.Redis, agent: str, action: str, text: str, **fields: Any) -> str:
    """Record and announce one message; returns its stream id."""
    payload = dumps(message(agent, action, text, **fields))
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(FEED_STREAM, {"json": payload}, maxlen=FEED_STREAM_MAXLEN, approximate=True)
        pipe.publish(Channels.FEED, payload)
        stream_id, _ = await pipe.execute()
    return stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)


def _entry(stream_id: bytes | str | None, fields: Mapping[Any, bytes | str] | None) -> dict[str, Any]:
    fields = fields or {}
    raw = fields.get(b"json", fields.get("json", b"{}"))
    body = json.loads(raw)
    return {"id": stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id), **body}


async def read(redis: aioredis.Redis, after: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Up to ``limit`` messages, oldest first, each with its stream ``id``: those right after
    stream id ``after`` (``0-0``: from the oldest kept), or without ``after`` the newest ones (a
    reader starting fresh gets the recent history, then pages on with ``after``)."""
    if after is None:
        entries = list(reversed(await redis.xrevrange(FEED_STREAM, max="+", min="-", count=limit) or []))
    else:
        entries = await redis.xrange(FEED_STREAM, min=f"({after}", max="+", count=limit) or []
    return [_entry(i, f) for i, f in entries]


async def wait_new(redis: aioredis.Redis, after: str, block_ms: int = 1000, limit: int = 100) -> list[dict[str, Any]]:
    """Block up to ``block_ms`` for messages after ``after`` ('$': only new ones)."""
    result = await redis.xread({FEED_STREAM: after}, count=limit, block=block_ms) or []
    # [[stream, entries], ...] in RESP2 (this client's protocol), {stream: entries} in RESP3
    streams: list[list[Any]] = (
        result if isinstance(result, list) else [[name, entries] for name, entries in result.items()]
    )
    return [_entry(i, f) for _, entries in streams for i, f in entries]


_STREAM_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
_STREAM_ID_MAX = 2**64 - 1
STREAM_ID_FORM = (
    "a stream id <milliseconds>-<sequence>: two whole numbers below 2^64 in ASCII digits (e.g. "
    "1764107112412-0, the id of a feed message you have read; 0-0: from the oldest)"
)


def is_stream_id(value: str) -> bool:
    """Whether Redis takes ``value`` as the exclusive start of a read (else it answers an error,
    which must not look like Redis being down): each number at most 2^64-1, and not the largest
    id, after which nothing can come."""
    found = _STREAM_ID.fullmatch(value)
    if found is None:
        return False
    ms, seq = int(found[1]), int(found[2])
    return ms <= _STREAM_ID_MAX and seq <= _STREAM_ID_MAX and (ms, seq) != (_STREAM_ID_MAX, _STREAM_ID_MAX)


def id_order(stream_id: str) -> tuple[int, int]:
    """A stream id as the pair it is ordered by (ids from Redis, or checked by ``is_stream_id``)."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
