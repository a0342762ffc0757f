"""``GET /v1/world/replay/verify?from=A&to=B``: replay the world's journal over ticks A..B with no
trait host and compare every recorded state hash (operators).

The replay runs in the worker (ReplayVerifyWorkflow, one per range and journal length, so a request
while it runs joins it and a finished one answers at once); this route waits for it up to
``WAIT_S``, then answers 202 with its progress and a ``Retry-After`` — the same GET later returns the
result."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from api.auth import OPERATOR_ERRORS, require_operator
from api.errors import ApiError, Responses, invalid_field, unavailable
from api.schemas import ErrorResponse
from genesis.dto import ReplayVerifyReport, ReplayVerifyRequest
from genesis.workflow_api import REPLAY_VERIFY_WORKFLOW, replay_verify_workflow_id
from pipeline import audit

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


@router.get(
    "/v1/world/replay/verify",
    response_model=ReplayVerifyReport,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def verify_replay(
    request: Request,
    from_tick: Annotated[int, Query(alias="from", ge=0, le=2**62, description="First world tick to check")],
    to_tick: Annotated[int, Query(alias="to", ge=0, le=2**62, description="Last world tick to check")],
) -> Any:
    """Replay ticks ``from``..``to`` of the journal's current epoch from the latest kept snapshot at
    or before ``from``, through the live engine's apply path, with no trait host: ``{"equal": true,
    ...}``, or ``equal`` false with ``divergence``: the first divergent record, its tick, and the
    entities and fields that differ (recorded and replayed values)."""
    services = request.app.state.services
    if to_tick < from_tick:
        raise invalid_field("query.to", f"to ({to_tick}) must be >= from ({from_tick})")
    most = services.settings.journal.verify_max_ticks
    if to_tick - from_tick > most:
        raise invalid_field("query.to", f"at most {most} ticks in one replay (GENESIS_JOURNAL_VERIFY_MAX_TICKS)")
    try:
        journal_length, _ = await audit.position(services.sessions)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading the journal's position") from exc
    client = await services.temporal()
    workflow_id = replay_verify_workflow_id(from_tick, to_tick, journal_length)
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
        body = {"state": "running", "workflow_id": workflow_id, "progress": await _progress(handle)}
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
