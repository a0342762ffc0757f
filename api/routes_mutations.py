"""Propose a mutation and follow it: POST /api/mutations/propose, GET /api/mutations/{id}/status."""

from __future__ import annotations

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from api.errors import ApiError
from api.schemas import ErrorResponse, MutationStatusResponse, ProposeRequest, ProposeResponse
from genesis.db.models import Mutation
from genesis.dto import MutationInput, MutationStatus
from genesis.ids import MUTATION_ID_PATTERN, mutation_id_for_idempotency_key, mutation_workflow_id, new_mutation_id
from genesis.workflow_api import MUTATION_WORKFLOW, SA_AGENT_ID, SA_STATUS, SA_TRAIT_NAME

router = APIRouter(prefix="/api/mutations", tags=["mutations"])

ERRORS = {
    400: {"model": ErrorResponse, "description": "Malformed JSON"},
    404: {"model": ErrorResponse, "description": "Unknown mutation"},
    413: {"model": ErrorResponse, "description": "Body too large"},
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "A dependency is unavailable; nothing was recorded"},
}


@router.post("/propose", status_code=202, response_model=ProposeResponse, responses=ERRORS)
async def propose(
    body: ProposeRequest,
    request: Request,
    idempotency_key: str | None = Header(default=None, max_length=128, description="Retry-safe: same key, same mutation"),
) -> JSONResponse:
    """Submit a trait. It is validated, sandboxed and judged by a durable MutationWorkflow;
    poll the status URL (or watch the workflow in the Temporal UI)."""
    services = request.app.state.services
    mutation_id = (
        mutation_id_for_idempotency_key(body.agent_id, idempotency_key) if idempotency_key else new_mutation_id()
    )
    workflow_id = mutation_workflow_id(mutation_id)
    client = await services.temporal()  # fail before writing anything if Temporal is down
    record = Mutation(
        mutation_id=mutation_id, agent_id=body.agent_id, task_id=body.task_id, trait_name=body.trait_name,
        goal=body.goal, code=body.code, status=MutationStatus.queued.value, validation_log=[],
        workflow_id=workflow_id, client_ip=request.client.host if request.client else None,
    )
    async with services.sessions() as session:
        session.add(record)
        try:
            await session.commit()
        except IntegrityError:  # the same Idempotency-Key again: answer with the existing mutation
            await session.rollback()
            existing = await session.get(Mutation, mutation_id)
            if existing is None or existing.code != body.code or existing.trait_name != body.trait_name:
                raise ApiError(409, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used for a different proposal")
            return _accepted(existing.mutation_id, existing.status, "Mutation already accepted (same Idempotency-Key)")
    try:
        await client.start_workflow(
            MUTATION_WORKFLOW,
            MutationInput(
                mutation_id=mutation_id, agent_id=body.agent_id, trait_name=body.trait_name,
                code=body.code, goal=body.goal, task_id=body.task_id,
            ),
            id=workflow_id,
            task_queue=services.settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes([
                SearchAttributePair(SA_AGENT_ID, body.agent_id),
                SearchAttributePair(SA_TRAIT_NAME, body.trait_name),
                SearchAttributePair(SA_STATUS, MutationStatus.queued.value),
            ]),
        )
    except Exception as exc:
        async with services.sessions() as session:  # leave nothing half-written behind
            await session.execute(delete(Mutation).where(Mutation.mutation_id == mutation_id))
            await session.commit()
        raise ApiError(503, "WORKFLOW_START_FAILED", f"could not start the mutation workflow: {exc}") from exc
    return _accepted(mutation_id, MutationStatus.queued.value, "Mutation accepted for validation")


def _accepted(mutation_id: str, status: str, message: str) -> JSONResponse:
    body = ProposeResponse(
        mutation_id=mutation_id, status=status, message=message,
        status_url=f"/api/mutations/{mutation_id}/status", workflow_id=mutation_workflow_id(mutation_id),
    )
    return JSONResponse(body.model_dump(), status_code=202)


@router.get("/{mutation_id}/status", response_model=MutationStatusResponse, responses=ERRORS)
async def status(mutation_id: str, request: Request) -> MutationStatusResponse:
    """Where a mutation is in its pipeline, with the validation log a person can act on."""
    if not MUTATION_ID_PATTERN.match(mutation_id):
        raise ApiError(404, "MUTATION_NOT_FOUND", f"no mutation {mutation_id!r}: ids look like 'mut_' followed by hex digits")
    async with request.app.state.services.sessions() as session:
        record = await session.scalar(select(Mutation).where(Mutation.mutation_id == mutation_id))
    if record is None:
        raise ApiError(404, "MUTATION_NOT_FOUND", f"no mutation {mutation_id!r}")
    return MutationStatusResponse(
        mutation_id=record.mutation_id, trait_name=record.trait_name, agent_id=record.agent_id,
        status=record.status, failure_reason_code=record.failure_reason_code,
        created_at=record.created_at.timestamp(), updated_at=record.updated_at.timestamp(),
        validation_log=record.validation_log or [], goal=record.goal, task_id=record.task_id,
        code_hash=record.code_hash, workflow_id=record.workflow_id, sandbox_report=record.sandbox_report,
    )
