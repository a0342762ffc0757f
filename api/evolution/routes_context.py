"""Context for agents writing traits: GET /api/agents/context/sandbox-api and
GET /api/agents/context/metrics (the tasks are in ``api.evolution.routes_tasks``)."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Response
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import async_sessionmaker

from api.deps import ServicesDep
from api.errors import ApiError, ErrorResponse, unavailable
from api.evolution.schemas import MetricsResponse
from evolution import world_metrics
from genesis import rules

router = APIRouter(prefix="/api/agents/context", tags=["agent context"])
log = logging.getLogger("genesis.api.context")

# The metrics of a snapshot never change: answer from memory until a newer snapshot appears
# (the JSON already encoded through MetricsResponse, so a cached answer costs one Redis read).
_metrics_cache: dict[str, object] = {"head": None, "body": None}


@router.get("/sandbox-api")
async def sandbox_api() -> dict:
    """The rules a trait must follow (imports, banned calls and attributes, the Entity API,
    timeouts). Cache it and refetch when ``sandbox_rules_version`` changes."""
    return rules.sandbox_api_document()


@router.get(
    "/metrics",
    response_model=MetricsResponse,
    responses={503: {"model": ErrorResponse, "description": "No snapshot yet, or Redis unavailable"}},
)
async def metrics(services: ServicesDep) -> Response:
    """The world at its latest WorldSnapshot (``ws:snapshot:{tick}``): population, energy, food,
    deaths by cause since the previous snapshot, carriers per trait, and the anomalies the
    Watcher's rules find over the recent snapshots."""
    settings = services.settings
    try:
        heads = await world_metrics.recent_heads(services.redis, settings.engine.snapshot_interval)
        if heads and heads[0] == _metrics_cache["head"]:
            return Response(_metrics_cache["body"], media_type="application/json")
        history = await world_metrics.load_snapshots(services.redis, heads) if heads else []
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    if not history:
        raise ApiError(
            503,
            "NO_SNAPSHOT",
            f"no WorldSnapshot in Redis yet: the engine writes one every {settings.engine.snapshot_interval} ticks "
            "(start it with `python -m engine`; `make run` starts it)",
        )
    recently = True  # unknown counts as "recently": stagnation is then not reported
    if world_metrics.stagnating(history):
        recently = await _mutation_applied_since(services.sessions, time.time() - world_metrics.STAGNATION_QUIET_S)
    anomalies = world_metrics.detect_anomalies(
        history,
        max_entities=settings.engine.max_population,
        mutation_applied_recently=recently,
    )
    document = world_metrics.metrics_document(history[0], anomalies)
    body = MetricsResponse.model_validate(document).model_dump_json().encode()
    _metrics_cache.update(head=heads[0], body=body)
    return Response(body, media_type="application/json")


async def _mutation_applied_since(sessions: async_sessionmaker, since: float) -> bool:
    """Whether any mutation went live after ``since`` (True when Postgres cannot tell)."""
    return await world_metrics.mutation_applied_since(sessions, since)
