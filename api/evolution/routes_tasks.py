"""Tasks for external agents (open-mutation-api.md, Block 1) and claims on them.

- ``GET  /api/agents/context/tasks``          live tasks (never an expired one), soonest expiry first
- ``GET  /api/agents/tasks``                  the same list, where the writes on tasks are
- ``POST /api/agents/tasks``                  an operator publishes a task (the Watcher does too)
- ``POST /api/agents/tasks/{task_id}/claim``  take a task: one winner, the others get 409
- ``POST /api/agents/tasks/{task_id}/resolve`` an operator: the problem went away, end the task

Each task is a TaskWorkflow (id ``task-<task_id>``): it writes the task to Redis, keeps it for
its TTL with a durable timer and removes it when the TTL runs out, a mutation proposed for it is
activated, or it is resolved. The API only reads Redis and starts or signals workflows."""

from __future__ import annotations

import math
import time

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from temporalio.client import WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from api.auth import API_KEY, OPERATOR_ERRORS, acting_agent, require_operator
from api.deps import RedisDep, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses, unavailable
from api.evolution.schemas import (
    ClaimRequest,
    ClaimResponse,
    ResolveRequest,
    ResolveResponse,
    TaskCreatedResponse,
    TaskCreateRequest,
    TaskResponse,
    TasksResponse,
)
from api.paging import Cursor, Keyset, number, paged, text
from api.params import TASK_ID_PATTERN, TaskIdPath
from evolution import tasks, world_metrics
from genesis.dto import AgentTask
from genesis.workflow_api import TASK_SIGNAL_RESOLVE, task_workflow_id
from identity import operators

router = APIRouter(tags=["agent tasks"])
PAGES = Keyset("tasks", number, text(TASK_ID_PATTERN))  # (expires_at, task_id), ascending

ERRORS: Responses = {
    404: {"model": ErrorResponse, "description": "No such live task (unknown, expired or done)"},
    409: {"model": ErrorResponse, "description": "Claimed by another agent, or the task id is taken"},
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Redis or Temporal is unavailable"},
}
CLAIM_ERRORS: Responses = {
    **ERRORS,
    401: {"model": ErrorResponse, "description": "X-API-Key missing or unknown (GENESIS_AUTH=required)"},
    403: {"model": ErrorResponse, "description": "The body names another agent than the key's"},
}


def _redis_down(exc: Exception) -> ApiError:
    return unavailable("REDIS_UNAVAILABLE", "Redis", exc)


def _task_response(task: AgentTask, claim: tasks.Claim | None, now: float) -> TaskResponse:
    return TaskResponse(
        **task.model_dump(mode="json"),
        ttl_remaining_sec=max(0, int(task.expires_at - now)),
        claimed_by=claim.agent_id if claim else None,
        claim_lease_remaining_sec=round(claim.lease_remaining_s, 3) if claim else None,
    )


def _not_found(task_id: str) -> ApiError:
    return ApiError(
        404,
        "TASK_NOT_FOUND",
        f"no live task {task_id!r}: it may never have existed, have expired, or be done already "
        "(GET /api/agents/context/tasks lists the live ones)",
    )


@router.get(
    "/api/agents/context/tasks",
    response_model=TasksResponse,
    responses=paged({422: ERRORS[422], 503: ERRORS[503]}),
)
@router.get(
    "/api/agents/tasks",
    response_model=TasksResponse,
    responses=paged({422: ERRORS[422], 503: ERRORS[503]}),
    summary="List Tasks (the same as GET /api/agents/context/tasks)",
)
async def list_tasks(
    request: Request,
    response: Response,
    redis: RedisDep,
    limit: int = Query(100, ge=1, le=500),
    cursor: Cursor = None,
) -> TasksResponse:
    """Tasks from the Watcher (or an operator) that have not expired, soonest expiry first, each
    with ``ttl_remaining_sec`` and who has claimed it."""
    try:
        entries = await tasks.queue_entries(redis, limit + 1, PAGES.decode(cursor))
        entries, next_cursor = PAGES.page(request, response, entries, limit, lambda entry: entry)
        live = await tasks.live_tasks(redis, [task_id for _, task_id in entries])
    except (RedisError, OSError) as exc:
        raise _redis_down(exc) from exc
    now = time.time()
    return TasksResponse(tasks=[_task_response(task, claim, now) for task, claim in live], next_cursor=next_cursor)


@router.post(
    "/api/agents/tasks",
    status_code=201,
    response_model=TaskCreatedResponse,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def publish_task(body: TaskCreateRequest, services: ServicesDep) -> JSONResponse:
    """Publish a task for external agents (operator endpoint: X-Operator-Key).
    Its TaskWorkflow writes it to Redis within moments and ends it when its TTL runs out."""
    settings = services.settings
    task_id = body.task_id or tasks.new_task_id()
    world_context = body.world_context
    if world_context is None:
        world_context = {}
        try:
            recent = await world_metrics.recent_snapshots(services.redis, settings.engine.snapshot_interval, depth=1)
        except (RedisError, OSError) as exc:
            raise _redis_down(exc) from exc
        if recent:
            world_context = {"entity_count": recent[0].get("entity_count"), "avg_energy": recent[0].get("avg_energy")}
    ttl_s = settings.task.ttl_s(body.severity.value)
    task = AgentTask(
        task_id=task_id,
        expires_at=round(time.time() + ttl_s, 3),
        source=body.source,
        problem_type=body.problem_type,
        severity=body.severity,
        description=body.description,
        suggested_area=body.suggested_area,
        world_context=world_context,
        constraints=body.constraints if body.constraints is not None else list(tasks.TASK_CONSTRAINTS),
    )
    client = await services.temporal()
    try:
        await tasks.start_workflow(client, settings.task_queue, task)  # a task id names one task, ever
    except WorkflowAlreadyStartedError as exc:
        raise ApiError(
            409, "TASK_EXISTS", f"task id {task_id!r} is already taken: choose another or omit task_id"
        ) from exc
    except Exception as exc:
        raise unavailable("WORKFLOW_START_FAILED", "Temporal", exc, "starting the task workflow") from exc
    response = TaskCreatedResponse(
        **_task_response(task, None, time.time()).model_dump(),
        workflow_id=task_workflow_id(task_id),
        message=f"Task published for {ttl_s:.0f} s ({body.severity.value})",
    )
    return JSONResponse(response.model_dump(), status_code=201)


@router.post("/api/agents/tasks/{task_id}/claim", status_code=201, response_model=ClaimResponse, responses=CLAIM_ERRORS)
async def claim_task(
    task_id: TaskIdPath,
    services: ServicesDep,
    body: ClaimRequest | None = None,
    api_key: str | None = Depends(API_KEY),
) -> JSONResponse:
    """Take a task so that no other agent works on it. The claim is a lease of
    ``GENESIS_TASK_CLAIM_LEASE_S`` seconds (never past the task's expiry): it lapses unless you
    propose a mutation for the task (``task_id`` in the proposal) in time; each such proposal
    renews it. 201 for a new claim, 200 if it already was yours, 409 if another agent holds it.
    Needs the agent's ``X-API-Key`` (unless GENESIS_AUTH=open: then ``agent_id`` in the body)."""
    agent_id = await acting_agent(services, api_key, body.agent_id if body else None)
    try:
        outcome = await tasks.claim(services.redis, task_id, agent_id, services.settings.task.claim_lease_s)
    except (RedisError, OSError) as exc:
        raise _redis_down(exc) from exc
    if outcome.code == tasks.CLAIM_NO_TASK:
        raise _not_found(task_id)
    if outcome.code == tasks.CLAIM_TAKEN:
        raise ApiError(
            409,
            "TASK_ALREADY_CLAIMED",
            f"task {task_id!r} is claimed by agent {outcome.holder!r} for another {outcome.lease_remaining_s:.0f} s "
            "(the lease lapses unless they propose a mutation for it); pick another task or try again later",
            headers={"Retry-After": str(max(1, math.ceil(outcome.lease_remaining_s)))},
        )
    won = outcome.code == tasks.CLAIM_WON
    response = ClaimResponse(
        task_id=task_id,
        agent_id=agent_id,
        lease_sec=round(outcome.lease_remaining_s, 3),
        lease_expires_at=round(time.time() + outcome.lease_remaining_s, 3),
        task_expires_at=outcome.task_expires_at,
        message=(
            f"Task claimed: propose a mutation with task_id {task_id!r} within {outcome.lease_remaining_s:.0f} s"
            if won
            else "You already hold this claim (the lease is not extended by claiming again)"
        ),
    )
    return JSONResponse(response.model_dump(), status_code=201 if won else 200)


@router.post(
    "/api/agents/tasks/{task_id}/resolve",
    status_code=202,
    response_model=ResolveResponse,
    responses={**ERRORS, **OPERATOR_ERRORS},
)
async def resolve_task(
    task_id: TaskIdPath,
    services: ServicesDep,
    body: ResolveRequest | None = None,
    operator: operators.Operator | None = Depends(require_operator),
) -> JSONResponse:
    """The problem went away: end the task now, claimed or not (operator endpoint: X-Operator-Key;
    the Watcher signals the workflow itself). Its TaskWorkflow removes it and announces ``TaskClosed``."""
    client = await services.temporal()
    handle: WorkflowHandle = client.get_workflow_handle(task_workflow_id(task_id))
    try:
        who = f"operator {operator.label}" if operator is not None else "an operator (GENESIS_AUTH=open)"
        await handle.signal(TASK_SIGNAL_RESOLVE, f"resolved by {who}: {body.reason if body else 'resolved'}")
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # never existed, or its workflow has ended
            raise _not_found(task_id) from exc
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "signalling the task workflow") from exc
    response = ResolveResponse(task_id=task_id, message="The task is being closed")
    return JSONResponse(response.model_dump(), status_code=202)
