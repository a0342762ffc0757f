"""World snapshots as the engine writes them to Redis, for tests of the Watcher and its triggers."""

from __future__ import annotations

import time
import uuid

from engine.process.telemetry import to_redis_hash
from genesis import redis_keys as keys

BASE = {
    "entity_count": 200,
    "avg_energy": 60.0,
    "births_last_period": 10,
    "deaths_last_period": 10,
    "death_starvation": 5,
    "death_age": 5,
    "death_collision": 0,
    "resource_density": 0.5,
    "trait_diversity": 5,
    "dominant_trait": "",
    "temperature": 20.0,
    "state_hash": "x",
    "resource_count": 100,
    "trait_usage": {},
    "trait_stats": {},
    "tick_overruns": 0,
    "ticks_per_second": 30.0,
}


async def write_snapshots(redis_client, interval: int, *changes: dict) -> int:
    """Snapshots of a fresh run, as the engine writes them (newest last); the newest tick."""
    tick, run_id = 10_000_000 + int(time.time()) % 1_000_000, uuid.uuid4().hex
    for change in changes:
        tick += interval
        key = keys.world_snapshot(tick)
        snap = {**BASE, **change, "tick": tick, "timestamp": time.time(), "run_id": run_id}
        await redis_client.hset(key, mapping=to_redis_hash(snap))
        await redis_client.expire(key, 60)
        await redis_client.set(keys.WORLD_TICK, tick)
    return tick
