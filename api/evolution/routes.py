"""``POST /api/evolution/trigger``: an operator forces a Watcher trigger, and
``GET /api/evolution/cycles[/{trigger_id}]``: the evolution cycles' records.

It goes through the Watcher's own code (evolution/watcher.py): the cooldown of the type (critical
skips it) and a limit of forced triggers of their own apply (the Watcher's circuit breaker does
not: forced triggers neither open it nor are stopped by it), the WorldReport is written to
``evo:trigger:{id}``, a TaskWorkflow publishes the task, the EvolutionCycleWorkflow starts and the
feed gets ``anomaly_detected``."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from api.auth import OPERATOR_ERRORS, require_operator
from api.deps import ServicesDep, SessionsDep
from api.errors import ApiError, ErrorResponse, RateLimitResponse, Responses, unavailable
from api.evolution.schemas import CycleListResponse, CycleResponse, EvolutionTriggerRequest, EvolutionTriggerResponse
from api.paging import Cursor, Keyset, moment, paged, text
from api.params import TRIGGER_ID_PATTERN, TriggerIdPath
from evolution import cycles, watcher as watching
from genesis import redis_keys as keys
from genesis.workflow_api import evolution_workflow_id

router = APIRouter(tags=["evolution"])

ERRORS: Responses = {
    409: {"model": ErrorResponse, "description": "Cooldown of the type active, or no anomaly to trigger"},
    429: {
        "model": RateLimitResponse,
        "description": "FORCED_TRIGGER_LIMIT: too many forced triggers in the window; retry after retry_after_sec",
    },
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "No snapshot yet, or Redis / Temporal unavailable"},
}
START_WAIT_S = 10.0
PAGES = Keyset("cycles", moment, text(TRIGGER_ID_PATTERN))  # (created_at, trigger_id), descending


@router.post(
    "/api/evolution/trigger",
    status_code=202,
    response_model=EvolutionTriggerResponse,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def force_trigger(services: ServicesDep, body: EvolutionTriggerRequest | None = None) -> JSONResponse:
    """Force a trigger from the latest WorldSnapshot with the given anomaly type (or the worst
    one the rules detect). Returns the ``trigger_id`` (WorldReport at ``evo:trigger:{id}``, 10
    minutes) and the ``task_id`` published for external agents."""
    body = body or EvolutionTriggerRequest()
    settings = services.settings
    watcher = watching.Watcher(settings, services.redis, services.temporal, services.sessions)
    try:
        outcome = await watcher.force(body.anomaly_type, body.severity)
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    if outcome.status == watching.NO_SNAPSHOT:
        raise ApiError(503, "NO_SNAPSHOT", "no WorldSnapshot in Redis yet: start the engine (`make run`) and try again")
    if outcome.status == watching.NO_ANOMALY:
        raise ApiError(
            409,
            "NO_ANOMALY",
            "the Watcher's rules find no anomaly in the latest snapshots: name an anomaly_type to force one",
        )
    anomaly = outcome.anomaly
    assert anomaly is not None, "every outcome of a forced trigger past NO_ANOMALY names its anomaly"
    if outcome.status == watching.COOLDOWN:
        raise ApiError(
            409,
            "WATCHER_COOLDOWN",
            f"a {anomaly.type} trigger happened less than {settings.watcher.cooldown_s:.0f} s ago "
            "(severity critical skips the cooldown)",
        )
    if outcome.status == watching.LIMITED:
        raise ApiError(
            429,
            "FORCED_TRIGGER_LIMIT",
            f"at most {settings.forced_trigger_limit} forced triggers per {settings.forced_trigger_window_s} s "
            f"(GENESIS_FORCED_TRIGGER_LIMIT); try again in {outcome.retry_after_s} s",
            headers={"Retry-After": str(outcome.retry_after_s)},
            extra={"retry_after_sec": outcome.retry_after_s},
        )
    trigger_id, task_id = outcome.trigger_id, outcome.task_id
    assert outcome.status == watching.GO and trigger_id is not None and task_id is not None, outcome
    await watcher.drain(timeout=START_WAIT_S)  # the TaskWorkflow start (retried while Temporal is away)
    response = EvolutionTriggerResponse(
        trigger_id=trigger_id,
        task_id=task_id,
        problem_type=anomaly.type,
        severity=anomaly.severity,
        task_severity=watching.TASK_SEVERITY[anomaly.severity],
        suggested_area=anomaly.area,
        tick=int(outcome.tick or 0),
        report_key=keys.evolution_trigger(trigger_id),
        message=f"Trigger {trigger_id}: {anomaly.type} ({anomaly.severity}); task {task_id} published",
        cycle_workflow_id=evolution_workflow_id(trigger_id) if settings.evolution_cycles_enabled else None,
    )
    return JSONResponse(response.model_dump(), status_code=202)


@router.get(
    "/api/evolution/cycles", response_model=CycleListResponse, responses=paged({422: ERRORS[422], 503: ERRORS[503]})
)
async def list_cycles(
    request: Request,
    response: Response,
    sessions: SessionsDep,
    limit: int = Query(default=50, ge=1, le=500),
    status: Literal["running", "succeeded", "failed"] | None = None,
    cursor: Cursor = None,
) -> dict:
    """The newest evolution cycles first: stage, plan, code, mutation, LLM tokens and estimated cost, error."""
    after = PAGES.decode(cursor)
    try:
        rows = await cycles.list_cycles(sessions, limit + 1, status, after)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    rows, next_cursor = PAGES.page(request, response, rows, limit, lambda row: (row.created_at, row.trigger_id))
    return {"cycles": [cycles.as_dict(row) for row in rows], "next_cursor": next_cursor}


@router.get(
    "/api/evolution/cycles/{trigger_id}",
    response_model=CycleResponse,
    responses={404: {"model": ErrorResponse, "description": "No cycle with that trigger id"}, 503: ERRORS[503]},
)
async def get_cycle(trigger_id: TriggerIdPath, sessions: SessionsDep) -> dict:
    try:
        found = await cycles.get_cycle(sessions, trigger_id)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    if found is None:
        raise ApiError(
            404,
            "CYCLE_NOT_FOUND",
            f"no evolution cycle {trigger_id!r} (ids are trigger ids: trg_… for the "
            "Watcher's, sch_<schedule>-<time> for a schedule's runs)",
        )
    return found
