"""The living world, as the engine reports it through Redis and Postgres (the API never imports
the engine):

- ``GET /api/world/state``     tick, population, the world's parameters
- ``GET /api/world/entities``  a bounded list of entities (lowest ids first)
- ``GET /api/world/entities/{id}`` one entity of that list (the viewer's inspector)
- ``GET /api/world/history``   the WorldSnapshots of one run (Redis and Postgres, api/world/history.py)
- ``GET /api/stats``           tick rate, population, energy, live and running traits, applied mutations
- ``WS  /ws/world``            viewer frames relayed from ``ch:world:frames``

The engine refreshes ``engine:status``, ``engine:params`` and ``engine:entities`` about once a
second; before it has ever run these answer 503 ``ENGINE_NOT_RUNNING``."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Path, Query, Request, Response, WebSocket
from redis.exceptions import RedisError
from sqlalchemy import func, select

from api import engine_status
from api.deps import RedisDep, ServicesDep, WorldFramesHubDep
from api.errors import ApiError, ErrorResponse, Responses, unavailable
from api.fanout import pump
from api.paging import Cursor, Keyset, paged, whole
from api.world.history import read_history
from api.world.schemas import HistoryResponse
from genesis import redis_keys as keys
from genesis.db.models import Mutation
from pipeline.live import live_trait_names
from pipeline.quarantines import quarantined

router = APIRouter(tags=["world"])
log = logging.getLogger("genesis.api.world")

APPLIED_STATUSES = ("activated", "kept")  # applied and not rolled back (a trait's older versions too)
MAX_ENTITIES = 500
MAX_HISTORY_POINTS = 1000
RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,32}$"
ENTITY_PAGES = Keyset("entities", whole(2**63))  # (id,), ascending: the engine reports entities in id order
NOT_RUNNING: Responses = {
    503: {
        "model": ErrorResponse,
        "description": "ENGINE_NOT_RUNNING (the engine has never reported) or REDIS_UNAVAILABLE",
    }
}
_num = engine_status.number
_running = engine_status.running


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def _engine_status(redis: aioredis.Redis) -> dict[str, str]:
    try:
        status = await engine_status.read(redis)
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    if not status:
        raise ApiError(
            503,
            "ENGINE_NOT_RUNNING",
            "the world engine has not reported yet: start it with `python -m engine` (`make run` starts it)",
        )
    return status


def _mode(status: dict[str, str]) -> str:
    """``paced`` (the fixed-timestep loop) or ``fast_forward`` (as fast as the machine allows);
    an engine that does not say ran paced."""
    return status.get("mode", "paced")


@router.get("/api/world/state", responses=NOT_RUNNING)
async def world_state(redis: RedisDep) -> dict:
    """Tick, population and the parameters of the running world."""
    status = await _engine_status(redis)
    try:
        params_raw = await redis.get(keys.ENGINE_PARAMS)
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    return {
        "tick": _num(status, "tick", int),
        "population": _num(status, "population", int),
        "resource_count": _num(status, "resource_count", int),
        "ticks_per_second": _num(status, "ticks_per_second"),
        "mode": _mode(status),
        "running": _running(status),
        "run_id": status.get("run_id"),
        "seed": _num(status, "seed", int),
        "started_at": _num(status, "started_at"),
        "updated_at": _num(status, "updated_at"),
        "params": json.loads(params_raw) if params_raw else None,
    }


async def _published_entities(redis: aioredis.Redis) -> list[dict[str, Any]]:
    """The entities of the engine's last status (``engine:entities``), lowest ids first."""
    try:
        raw = await redis.get(keys.ENGINE_ENTITIES)
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    return json.loads(raw) if raw else []


@router.get("/api/world/entities", responses=paged({**NOT_RUNNING, 422: {"model": ErrorResponse}}))
async def world_entities(
    request: Request,
    response: Response,
    redis: RedisDep,
    limit: int = Query(100, ge=1, le=MAX_ENTITIES, description="how many entities (1..500), lowest ids first"),
    cursor: Cursor = None,
) -> dict:
    """Entities of the running world (refreshed about once a second), lowest ids first; each
    page is read from the engine's latest report, and a cursor goes on after the last id seen."""
    after = ENTITY_PAGES.decode(cursor)
    status = await _engine_status(redis)
    entities = await _published_entities(redis)
    if after is not None:
        entities = [entity for entity in entities if entity["id"] > after[0]]
    entities, next_cursor = ENTITY_PAGES.page(request, response, entities, limit, lambda entity: (entity["id"],))
    return {
        "tick": _num(status, "tick", int),
        "population": _num(status, "population", int),
        "count": len(entities),
        "entities": entities,
        "next_cursor": next_cursor,
    }


@router.get(
    "/api/world/entities/{entity_id}",
    responses={
        **NOT_RUNNING,
        404: {"model": ErrorResponse, "description": "ENTITY_NOT_FOUND: not among the entities the engine published"},
    },
)
async def world_entity(
    redis: RedisDep,
    entity_id: int = Path(ge=0, le=2**53, description="The Molbot's id (the first value of its entry in a frame)"),
) -> dict:
    """One entity as the engine last published it (about once a second): position, energy, age,
    generation and every trait it carries."""
    status = await _engine_status(redis)
    entities = await _published_entities(redis)
    entity = next((e for e in entities if e.get("id") == entity_id), None)
    if entity is None:
        raise ApiError(
            404,
            "ENTITY_NOT_FOUND",
            f"no Molbot {entity_id} among the {len(entities)} entities the engine published at tick "
            f"{_num(status, 'tick', int)}: it has died or is not born yet, or its id is past the lowest "
            "GENESIS_ENGINE_ENTITIES_LIMIT ids the engine publishes",
        )
    return {"tick": _num(status, "tick", int), "entity": entity}


@router.get(
    "/api/world/history",
    response_model=HistoryResponse,
    responses={
        **NOT_RUNNING,
        422: {"model": ErrorResponse, "description": "A parameter is out of range, or from_tick > to_tick"},
    },
)
async def world_history(
    services: ServicesDep,
    run_id: str | None = Query(
        None,
        pattern=RUN_ID_PATTERN,
        description="The engine run (`run_id` of GET /api/world/state); default: the running one",
    ),
    from_tick: int = Query(0, ge=0, le=2**53, description="The first tick of the range"),
    to_tick: int | None = Query(None, ge=0, le=2**53, description="The last tick of the range; default: the newest"),
    limit: int = Query(
        500, ge=1, le=MAX_HISTORY_POINTS, description=f"At most this many points (1..{MAX_HISTORY_POINTS}), the newest"
    ),
) -> HistoryResponse:
    """Population, mean energy and carriers per trait at the WorldSnapshots of one engine run,
    oldest first: every snapshot of the last minutes (Redis), and every
    ``GENESIS_ENGINE_POSTGRES_EVERY``-th one before them (Postgres, kept seven days)."""
    if to_tick is not None and from_tick > to_tick:
        message = f"from_tick ({from_tick}) is after to_tick ({to_tick})"
        raise ApiError(
            422, "VALIDATION_ERROR", message, extra={"errors": [{"field": "query.from_tick", "message": message}]}
        )
    if run_id is None:
        run_id = (await _engine_status(services.redis)).get("run_id") or ""
    return await read_history(services, run_id, from_tick, to_tick, limit)


@router.get("/api/stats", responses=NOT_RUNNING)
async def stats(services: ServicesDep) -> dict:
    """The engine's headline numbers. ``live_traits`` are the live traits (the same set as
    ``GET /api/traits`` lists), ``active_traits`` those the engine's trait host ran at its last
    report (they follow the live set within a second or two); ``mutations_applied`` counts the
    mutations activated or kept and not rolled back (a trait's superseded versions too). The
    Postgres figures are null while Postgres is unreachable."""
    status = await _engine_status(services.redis)
    live, applied = None, None
    try:
        async with services.sessions() as session:
            live = await asyncio.wait_for(live_trait_names(session), timeout=3)
            applied = await asyncio.wait_for(
                session.scalar(
                    select(func.count())
                    .select_from(Mutation)
                    .where(Mutation.status.in_(APPLIED_STATUSES), ~quarantined(Mutation.mutation_id))
                ),
                timeout=3,
            )
    except Exception as exc:  # stats must answer while Postgres is down
        log.warning("reading the live traits and applied mutations failed: %s", exc)
    return {
        "tick": _num(status, "tick", int),
        "ticks_per_second": _num(status, "ticks_per_second"),
        "mode": _mode(status),
        "population": _num(status, "population", int),
        "avg_energy": _num(status, "avg_energy"),
        "live_traits": live,
        "active_traits": engine_status.running_traits(status),
        "mutations_applied": applied,
        "tick_overruns": _num(status, "tick_overruns", int),
        "mean_tick_ms": _num(status, "mean_tick_ms"),
        "running": _running(status),
    }


@router.websocket("/ws/world")
async def world_frames(websocket: WebSocket, hub: WorldFramesHubDep) -> None:
    """Relay the engine's viewer frames: ``{"tick", "entities": [[id, x, y, energy, trait|null]],
    "resources": [[x, y]]}`` about 30 times a second, from this process's one subscription
    (api/stream_hubs.py). A slow client gets the newest frame and skips the ones in between; a
    client that takes no frame for a while is closed (1013); a Redis outage pauses the stream
    without closing it."""
    subscriber = hub.subscribe(latest_only=True)
    try:
        await websocket.accept()
    except Exception:
        hub.unsubscribe(subscriber)
        raise
    await pump(websocket, hub, subscriber)
