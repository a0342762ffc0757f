"""The engine's status as it reports it to Redis (``engine:status``, about once a second): read
by the world routes and by ``GET /api/traits`` (which traits the engine is running)."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import redis.asyncio as aioredis

from genesis import redis_keys as keys

STALE_AFTER_S = 5.0  # no status for this long: the engine is reported as not running


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def read(redis: aioredis.Redis) -> dict[str, str]:
    """The engine's last status (empty: it never reported). Redis errors propagate."""
    raw = await redis.hgetall(keys.ENGINE_STATUS)
    return {_text(k): _text(v) for k, v in raw.items()}


def number(status: dict[str, str], name: str, kind=float) -> Any:
    """A number of the engine's status, or None when missing, malformed or not finite (JSON has
    no NaN or Infinity: one in a response would be a 500)."""
    try:
        value = kind(status[name])
    except (KeyError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def running(status: dict[str, str]) -> bool:
    """Whether the engine reported within the last few seconds."""
    updated = number(status, "updated_at")
    return updated is not None and time.time() - updated < STALE_AFTER_S


def running_traits(status: dict[str, str]) -> list[str]:
    """The traits the engine's trait host ran at its last report (``active_traits``)."""
    try:
        names = json.loads(status.get("active_traits", "[]"))
    except ValueError:
        return []
    return sorted(str(name) for name in names) if isinstance(names, list) else []
