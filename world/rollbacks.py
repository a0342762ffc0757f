"""Asking the engine to take the world back to a kept snapshot (engine/process/rollbacks.py applies it):
the queue of the operators' ``POST /v1/world/rollback``."""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from genesis import redis_keys as keys


async def request(redis: aioredis.Redis, request_id: str, target: dict[str, Any], reason: str, by: str) -> bool:
    """Queue a rollback (``target``: ``snapshot``, ``tick`` or ``mutation_id``); False when a
    request with this id was made already (nothing is queued twice)."""
    now = round(time.time(), 3)
    status = {"request_id": request_id, "status": "requested", "reason": reason, "requested_at": now}
    if not await redis.set(keys.world_rollback(request_id), json.dumps(status), ex=keys.WORLD_ROLLBACK_TTL_S, nx=True):
        return False
    queued = {"request_id": request_id, **target, "reason": reason, "requested_by": by, "requested_at": now}
    await redis.rpush(keys.WORLD_ROLLBACK_REQUESTS, json.dumps(queued))
    return True
