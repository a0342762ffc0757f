"""An operator's decision on a mutation that the manifest's approval rules hold before it goes
live: ``POST /api/mutations/{mutation_id}/approval`` (docs/governance.md#approval-of-risky-mutations).

The MutationWorkflow waits at ``awaiting_approval`` on a durable timer; the decision reaches it as
its ``approval`` signal. Approved, it goes live as any other; rejected, or with no decision before
the manifest's ``approvals.ttl_sec``, it ends ``rejected`` with ``APPROVAL_REJECTED`` or
``APPROVAL_EXPIRED``."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from temporalio.service import RPCError

from api import gate
from api.auth import OPERATOR_ERRORS, require_operator
from api.deps import ServicesDep
from api.errors import ApiError, ErrorResponse, unavailable
from api.mutations.records import MUTATION_ERRORS, load_mutation
from api.mutations.schemas import ApprovalAccepted, ApprovalRequest
from api.params import MutationIdPath
from genesis.dto import MutationApproval, MutationStatus
from genesis.workflow_api import MUTATION_APPROVAL_SIGNAL
from identity.operators import Operator

router = APIRouter(prefix="/api/mutations", tags=["mutations"])


@router.post(
    "/{mutation_id}/approval",
    status_code=202,
    response_model=ApprovalAccepted,
    responses={
        **MUTATION_ERRORS,
        **OPERATOR_ERRORS,
        409: {"model": ErrorResponse, "description": "NOT_AWAITING_APPROVAL, REPORT_MISMATCH"},
        503: {"model": ErrorResponse, "description": "Temporal or Postgres unavailable"},
    },
)
async def decide(
    mutation_id: MutationIdPath,
    body: ApprovalRequest,
    services: ServicesDep,
    operator: Operator | None = Depends(require_operator),
) -> JSONResponse:
    """Approve or reject a mutation awaiting approval (operators only)."""
    record = await load_mutation(services, mutation_id)
    by = await gate.operator_decides(services, operator, "mutations.approve", f"mutation:{mutation_id}")
    if record.status != MutationStatus.awaiting_approval.value:
        raise ApiError(409, "NOT_AWAITING_APPROVAL", f"{mutation_id} is {record.status}, not awaiting approval")
    held = (record.shadow_report or {}).get("report_hash")  # final once the mutation awaits approval
    if body.decision == "approve" and held and body.report_hash is None:
        message = f"required: an approval names the shadow report it approves; {mutation_id}'s is {held}"
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            f"body.report_hash: {message}",
            extra={"errors": [{"field": "body.report_hash", "message": message}]},
        )
    if body.report_hash is not None and body.report_hash != held:
        shown = f"its shadow report is {held}" if held else "it has no shadow report"
        raise ApiError(409, "REPORT_MISMATCH", f"report_hash {body.report_hash} is not {mutation_id}'s: {shown}")
    client = await services.temporal()
    try:
        handle = client.get_workflow_handle(record.workflow_id)
        await handle.signal(
            MUTATION_APPROVAL_SIGNAL,
            MutationApproval(decision=body.decision, by=by, reason=body.reason, report_hash=body.report_hash),
        )
    except RPCError as exc:
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "signalling the mutation's workflow") from exc
    answer = ApprovalAccepted(mutation_id=mutation_id, decision=body.decision, status=record.status)
    return JSONResponse(answer.model_dump(), status_code=202)
