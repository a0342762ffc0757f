"""The world's past for ``GET /api/world/history``: the WorldSnapshots of one engine run, read
back from both stores that hold them and merged. Redis keeps every snapshot for
``WORLD_SNAPSHOT_TTL_S`` (``ws:snapshot:{tick}``); Postgres keeps every
``GENESIS_ENGINE_POSTGRES_EVERY``-th one for days (``world_snapshots``). So the last minutes come
at every snapshot and the time before them more sparsely."""

from __future__ import annotations

import json
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from api.deps import Services
from api.errors import unavailable
from api.world.schemas import HistoryPoint, HistoryResponse
from genesis import redis_keys as keys
from genesis.db.models import WorldSnapshot

_FIELDS = ("run_id", "tick", "timestamp", "entity_count", "avg_energy", "trait_usage")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _usage(value: Any) -> dict[str, int]:
    """A snapshot's trait_usage (a JSON object of counts) as a dict; anything else as empty."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if type(v) in (int, float)}


async def _from_redis(
    services: Services, run_id: str, from_tick: int, to_tick: int | None, count: int
) -> list[HistoryPoint]:
    """The run's snapshots still in Redis, newest first: ``count`` snapshot ticks are looked up,
    counting down from ``to_tick`` (or the engine's latest tick)."""
    interval = services.settings.engine.snapshot_interval
    redis = services.redis
    try:
        latest = await redis.get(keys.WORLD_TICK)
        top = int(_text(latest)) if latest is not None else None
        if to_tick is not None:
            top = to_tick if top is None else min(top, to_tick)
        if top is None or top < from_tick:
            return []
        newest = top - top % interval
        ticks = range(newest, max(from_tick - 1, newest - count * interval), -interval)
        async with redis.pipeline(transaction=False) as pipe:
            for tick in ticks:
                pipe.hmget(keys.world_snapshot(tick), _FIELDS)
            rows = await pipe.execute()
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "reading snapshots") from exc
    except ValueError:  # a ws:tick that is not a number: no Redis history to offer
        return []
    points = []
    for values in rows:
        raw = dict(zip(_FIELDS, values, strict=True))
        if raw["tick"] is None or raw["run_id"] is None or _text(raw["run_id"]) != run_id:
            continue  # expired, or a snapshot of another run at the same tick
        try:
            points.append(
                HistoryPoint(
                    tick=int(_text(raw["tick"])),
                    timestamp=float(_text(raw["timestamp"])),
                    entity_count=int(_text(raw["entity_count"])),
                    avg_energy=float(_text(raw["avg_energy"])),
                    trait_usage=_usage(raw["trait_usage"]),
                )
            )
        except (TypeError, ValueError):
            continue  # a malformed snapshot is left out
    return points


async def _from_postgres(
    services: Services, run_id: str, from_tick: int, to_tick: int | None, count: int
) -> list[HistoryPoint]:
    """The run's snapshots in ``world_snapshots``, newest first (at most ``count``)."""
    query = (
        select(
            WorldSnapshot.tick,
            WorldSnapshot.timestamp,
            WorldSnapshot.entity_count,
            WorldSnapshot.avg_energy,
            WorldSnapshot.data["trait_usage"],
        )
        .where(WorldSnapshot.run_id == run_id, WorldSnapshot.tick >= from_tick)
        .order_by(WorldSnapshot.tick.desc())
        .limit(count)
    )
    if to_tick is not None:
        query = query.where(WorldSnapshot.tick <= to_tick)
    try:
        async with services.sessions() as session:
            rows = (await session.execute(query)).all()
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading snapshots") from exc
    return [
        HistoryPoint(tick=tick, timestamp=timestamp, entity_count=n, avg_energy=energy, trait_usage=_usage(usage))
        for tick, timestamp, n, energy, usage in rows
    ]


async def read_history(
    services: Services, run_id: str, from_tick: int, to_tick: int | None, limit: int
) -> HistoryResponse:
    """At most ``limit`` snapshots of the run in ``[from_tick, to_tick]``, the newest, oldest first."""
    # One point more than asked for from each store: if it exists, the answer was cut.
    recent = await _from_redis(services, run_id, from_tick, to_tick, limit + 1)
    older = await _from_postgres(services, run_id, from_tick, to_tick, limit + 1)
    by_tick = {p.tick: p for p in older} | {p.tick: p for p in recent}
    newest_first = sorted(by_tick.values(), key=lambda p: p.tick, reverse=True)
    return HistoryResponse(run_id=run_id, points=newest_first[:limit][::-1], truncated=len(newest_first) > limit)
