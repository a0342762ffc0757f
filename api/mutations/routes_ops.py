"""Operations on a mutation after its workflow: re-run one whose workflow failed for an
infrastructure reason (POST /api/mutations/{id}/retry), and bring an extinct trait back
(POST /api/mutations/{id}/revive, a RevivalWorkflow).

Retry is a *fresh run with the same workflow id*, not a Temporal reset: every step of a
MutationWorkflow is cheap (validation ~10 ms, the sandbox test ~0.5 s) and idempotent on the
mutation id (the code-hash claim, activation), so re-running from the start costs under a second
and needs no choice of a reset point; the failed run stays in Temporal as the previous run of the
same id. A verdict (rejected, kept, rolled_back) or a live trait (activated) is never re-run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sqlalchemy import update
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from api.auth import API_KEY, OPERATOR_KEY
from api.deps import ServicesDep
from api.errors import ApiError, ErrorResponse, unavailable
from api.mutations.records import MUTATION_WRITE_ERRORS, load_own_mutation
from api.mutations.schemas import RetryResponse, ReviveResponse
from api.params import MutationIdPath
from api.workflow_starter import start_mutation_workflow
from genesis.db.models import Mutation
from genesis.dto import FateRequest, FateResult, MutationStatus
from genesis.workflow_api import REVIVAL_WORKFLOW, revival_workflow_id, search_attributes
from pipeline.mutation_proposals import mutation_input

router = APIRouter(prefix="/api/mutations", tags=["mutations"])

# Statuses that are verdicts on the code, or a trait that is live: a re-run would judge it again.
NOT_RETRYABLE = {
    MutationStatus.rejected.value: "it was rejected on its merits ({code}): fix the code and propose it again",
    MutationStatus.kept.value: "its verdict is in (kept): the trait is live; there is nothing to re-run",
    MutationStatus.rolled_back.value: "its verdict is in (rolled_back): propose a new version instead",
    MutationStatus.activated.value: "its trait is live and under observation: roll it back "
    "(POST /api/mutations/{id}/rollback) instead of re-running it",
    MutationStatus.extinct.value: "its verdict is in (kept), and it went extinct since: bring it back with "
    "POST /api/mutations/{id}/revive",
}
REVIVAL_WAIT_S = 20.0  # under the CLI's 30 s: a slow revival is answered, not timed out


@router.post(
    "/{mutation_id}/retry",
    status_code=202,
    response_model=RetryResponse,
    responses={
        **MUTATION_WRITE_ERRORS,
        409: {
            "model": ErrorResponse,
            "description": "NOT_RETRYABLE (a verdict or a live trait), MUTATION_IN_PROGRESS (its workflow is running)",
        },
    },
)
async def retry(
    mutation_id: MutationIdPath,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Re-run a mutation whose workflow ended without a verdict (Failed, TimedOut, Terminated,
    Canceled, or never started / vanished while the record is not final): a fresh run of its
    MutationWorkflow under the same workflow id. Needs the ``X-API-Key`` of the agent that
    proposed it or an ``X-Operator-Key`` (unless GENESIS_AUTH=open)."""
    record = (await load_own_mutation(services, mutation_id, api_key, operator_key, "retry it")).record
    if record.status in NOT_RETRYABLE:
        reason = NOT_RETRYABLE[record.status].format(code=record.failure_reason_code, id=mutation_id)
        raise ApiError(409, "NOT_RETRYABLE", f"mutation {mutation_id} is {record.status}: {reason}")
    client = await services.temporal()
    run_status = await _workflow_status(client, record.workflow_id)
    if run_status == WorkflowExecutionStatus.RUNNING:
        still = (
            " (a failed run may still be delivering its notify_url webhooks)"
            if record.status == MutationStatus.failed.value
            else ""
        )
        raise ApiError(
            409,
            "MUTATION_IN_PROGRESS",
            f"mutation {mutation_id} is {record.status} and its workflow {record.workflow_id} is still "
            f"running{still}: retry once it has ended (follow it with GET /api/mutations/{mutation_id}/status)",
        )
    if record.status == MutationStatus.sandbox_ok.value and run_status == WorkflowExecutionStatus.COMPLETED:
        raise ApiError(
            409,
            "NOT_RETRYABLE",
            f"mutation {mutation_id} passed its sandbox test and its workflow completed "
            "(activation was off): that is its verdict",
        )
    ended = run_status.name if run_status is not None else None
    note = (
        f"Retry: the previous run ended {ended}; started again"
        if ended
        else "Retry: no workflow run was found; started"
    )
    async with services.sessions() as session:
        reset = await session.scalar(
            update(Mutation)
            .where(Mutation.mutation_id == mutation_id, Mutation.status == record.status)
            .values(
                status=MutationStatus.queued.value,
                failure_reason_code=None,
                validation_log=[*(record.validation_log or []), note],
                updated_at=datetime.now(UTC),
            )
            .returning(Mutation)
        )
        await session.commit()
    if reset is None:
        raise ApiError(
            409,
            "MUTATION_IN_PROGRESS",
            f"mutation {mutation_id} changed status while the retry was being prepared; look again",
        )
    try:
        rerun = mutation_input(reset, services.settings).model_copy(update={"retried": True})
        handle = await start_mutation_workflow(client, services.settings, rerun, reset.workflow_id)
    except Exception as exc:  # the row is queued again: the API's sweeper starts it once Temporal answers
        unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "restarting the workflow")
        raise ApiError(
            503,
            "TEMPORAL_UNAVAILABLE",
            f"mutation {mutation_id} is queued again but its workflow could not be started now "
            f"({type(exc).__name__}); it will be started automatically once Temporal is reachable",
        ) from exc
    body = RetryResponse(
        mutation_id=mutation_id,
        status=MutationStatus.queued.value,
        workflow_id=reset.workflow_id,
        run_id=handle.result_run_id,
        previous_status=record.status,
        previous_workflow_status=ended,
        message=f"re-running {mutation_id} (previous run: {ended or 'none'})",
    )
    return JSONResponse(body.model_dump(), status_code=202)


@router.post(
    "/{mutation_id}/revive",
    response_model=ReviveResponse,
    responses={
        **MUTATION_WRITE_ERRORS,
        409: {
            "model": ErrorResponse,
            "description": "NOT_EXTINCT (only an extinct trait comes back), VERSION_CONFLICT (another version of "
            "the trait is live), LIVE_SET_FULL (the live set is at the manifest's max_live_traits and nothing "
            "in it can make room)",
        },
    },
)
async def revive(
    mutation_id: MutationIdPath,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Bring an extinct trait back into the live set (status ``kept`` again): newborns may gain it
    again, and the engine's ledger measures it afresh. A full live set makes room as an activation
    does. Needs the ``X-API-Key`` of the agent that proposed it or an ``X-Operator-Key`` (unless
    GENESIS_AUTH=open)."""
    allowed = await load_own_mutation(services, mutation_id, api_key, operator_key, "revive it")
    record = allowed.record
    if record.status != MutationStatus.extinct.value:
        raise ApiError(
            409, "NOT_EXTINCT", f"mutation {mutation_id} is {record.status}: only an extinct trait can be revived"
        )
    who = allowed.by or (f"its owner, agent '{record.agent_id}'" if api_key else "a caller (GENESIS_AUTH=open)")
    client = await services.temporal()
    try:
        handle = await client.start_workflow(
            REVIVAL_WORKFLOW,
            FateRequest(mutation_id=mutation_id, trait_name=record.trait_name, reason=f"revived by {who}"),
            id=revival_workflow_id(mutation_id),
            task_queue=services.settings.task_queue,
            search_attributes=search_attributes(agent_id=record.agent_id, trait_name=record.trait_name),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            result_type=FateResult,
        )
        result = await asyncio.wait_for(handle.result(), REVIVAL_WAIT_S)
    except TimeoutError as exc:
        raise ApiError(
            503,
            "REVIVAL_PENDING",
            f"the revival of {mutation_id} is under way but did not finish within {REVIVAL_WAIT_S:.0f} s: "
            f"follow GET /api/mutations/{mutation_id}/status",
        ) from exc
    except RPCError as exc:
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "starting the revival") from exc
    if not result.changed:
        raise ApiError(409, result.conflict_code or "NOT_EXTINCT", f"mutation {mutation_id}: {result.conflict}")
    body = ReviveResponse(
        mutation_id=mutation_id,
        status=MutationStatus.kept.value,
        registry_version=result.registry_version,
        message=f"'{record.trait_name}' v{record.trait_version} is live again",
    )
    return JSONResponse(body.model_dump(), status_code=200)


async def _workflow_status(client, workflow_id: str) -> WorkflowExecutionStatus | None:
    """How the latest run of ``workflow_id`` stands, or None if no run exists."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, f"looking up workflow {workflow_id}") from exc
    return description.status
