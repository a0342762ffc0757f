"""``GET /v1/world/replay/verify?from=A&to=B``: replay the world's journal over ticks A..B with no
trait host and compare every recorded state hash (operators).

The replay runs in the worker (ReplayVerifyWorkflow, one per epoch and range). A range that reaches
past the running world's tick is pinned at that tick when first asked (``to_tick`` of the answer),
so asking again with the answered range joins the same replay and a finished one answers at once.
This route waits up to ``WAIT_S``, then answers 202 with the workflow id, the pinned range, its
progress and a ``Retry-After``: the same GET later returns the result."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from api import engine_status
from api.auth import OPERATOR_ERRORS, require_operator
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses, invalid_field, unavailable
from genesis.db.models import AuditEventRow
from genesis.dto import ReplayVerifyReport, ReplayVerifyRequest
from genesis.workflow_api import REPLAY_VERIFY_WORKFLOW, replay_verify_workflow_id

router = APIRouter(tags=["world journal"])
WAIT_S = 20.0
RETRY_AFTER_S = 5
ERRORS: Responses = {
    202: {"description": "Still replaying: its progress; ask again (Retry-After)"},
    409: {
        "model": ErrorResponse,
        "description": "REPLAY_UNAVAILABLE: no journal, no snapshot before A, A past its end",
    },
    422: {"model": ErrorResponse, "description": "Invalid range (the detail says how)"},
    503: {"model": ErrorResponse, "description": "Postgres or Temporal unavailable"},
}


async def _progress(handle: WorkflowHandle) -> dict[str, Any] | None:
    """The replay's last heartbeat (tick, records replayed), if Temporal has one."""
    try:
        described = await handle.describe()
        pending = described.raw_description.pending_activities
        if pending and pending[0].heartbeat_details.payloads:
            from temporalio.converter import default

            return default().payload_converter.from_payloads(pending[0].heartbeat_details.payloads)[0]
    except Exception:  # progress is a courtesy: the answer is 202 either way
        return None
    return None


async def _current_epoch(sessions) -> int:
    """The journal's current epoch, by its newest audit event (0 before the first)."""
    async with sessions() as session:
        epoch = await session.scalar(select(AuditEventRow.epoch).order_by(AuditEventRow.seq.desc()).limit(1))
    return int(epoch or 0)


async def _pinned_end(services: Services, from_tick: int, to_tick: int) -> int:
    """``to_tick``, or the running world's tick if that is earlier (and not before ``from_tick``):
    an open end is pinned when first asked, so the range names one replay however long it runs."""
    try:
        status = await engine_status.read(services.redis)
    except RedisError:
        return to_tick
    tick = engine_status.number(status, "tick", int) if engine_status.running(status) else None
    return to_tick if tick is None or tick >= to_tick else max(tick, from_tick)


@router.get(
    "/v1/world/replay/verify",
    response_model=ReplayVerifyReport,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def verify_replay(
    services: ServicesDep,
    from_tick: Annotated[int, Query(alias="from", ge=0, le=2**62, description="First world tick to check")],
    to_tick: Annotated[int, Query(alias="to", ge=0, le=2**62, description="Last world tick to check")],
) -> Any:
    """Replay ticks ``from``..``to`` of the journal's current epoch from the latest kept snapshot at
    or before ``from``, through the live engine's apply path, with no trait host: ``{"equal": true,
    ...}``, or ``equal`` false with ``divergence``: the first divergent record, its tick, and the
    entities and fields that differ (recorded and replayed values)."""
    if to_tick < from_tick:
        raise invalid_field("query.to", f"to ({to_tick}) must be >= from ({from_tick})")
    try:
        epoch = await _current_epoch(services.sessions)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading the journal's epoch") from exc
    to_tick = await _pinned_end(services, from_tick, to_tick)
    most = services.settings.journal.verify_max_ticks
    if to_tick - from_tick > most:
        raise invalid_field("query.to", f"at most {most} ticks in one replay (GENESIS_JOURNAL_VERIFY_MAX_TICKS)")
    client = await services.temporal()
    workflow_id = replay_verify_workflow_id(epoch, from_tick, to_tick)
    try:
        handle: WorkflowHandle = await client.start_workflow(
            REPLAY_VERIFY_WORKFLOW,
            ReplayVerifyRequest(from_tick=from_tick, to_tick=to_tick),
            id=workflow_id,
            task_queue=services.settings.task_queue,
            result_type=ReplayVerifyReport,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
        )
    except WorkflowAlreadyStartedError:  # it ran to its end already: its result answers
        handle = client.get_workflow_handle(workflow_id, result_type=ReplayVerifyReport)
    try:
        report: ReplayVerifyReport = await asyncio.wait_for(asyncio.shield(handle.result()), WAIT_S)
    except TimeoutError:
        body = {
            "state": "running",
            "workflow_id": workflow_id,
            "from_tick": from_tick,
            "to_tick": to_tick,
            "progress": await _progress(handle),
        }
        return JSONResponse(body, status_code=202, headers={"Retry-After": str(RETRY_AFTER_S)})
    except WorkflowFailureError as exc:
        cause: BaseException | None = exc.cause
        while cause is not None and not isinstance(cause, ApplicationError):
            cause = cause.__cause__
        if isinstance(cause, ApplicationError) and cause.type == "REPLAY_UNAVAILABLE":
            raise ApiError(409, "REPLAY_UNAVAILABLE", cause.message) from exc
        why = f"the replay failed (workflow {workflow_id}: see the Temporal UI)"
        raise ApiError(503, "REPLAY_FAILED", why) from exc
    return report.model_dump()
