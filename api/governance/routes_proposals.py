"""Governed changes of the world's rules: ``/v1/governance/proposals``.

A proposal is an RFC 6902 patch of the manifest against its hash (governance/patches.py). The API
checks it (the base is the manifest in force, the patch applies, the result is a valid manifest
that differs), records it and starts its GovernanceWorkflow, which shadows it and waits for an
operator: an approval names the shadow report's hash; a rejection ends it; no decision within
the manifest's ``governance.proposal_ttl_sec`` and it expires."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from temporalio.service import RPCError

from api import gate
from api.auth import API_KEY, OPERATOR_ERRORS, OPERATOR_KEY, authenticate, operator_of, require_operator
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses, unavailable
from api.governance.schemas import (
    ApproveRequest,
    DecisionAccepted,
    ProposalAccepted,
    ProposalListResponse,
    ProposalRequest,
    ProposalResponse,
    RejectRequest,
)
from api.moments import unix
from api.mutations import admission
from api.paging import Cursor, Keyset, paged, whole
from genesis.dto import GovernanceDecision, GovernanceRequest
from genesis.workflow_api import GOVERNANCE_DECIDE_SIGNAL, GOVERNANCE_WORKFLOW, search_attributes
from governance import lifecycle, manifest as rules, patches, policy
from governance.records import manifests, proposals
from identity.operators import Operator

router = APIRouter(prefix="/v1/governance", tags=["governance"])
ERRORS: Responses = {
    404: {"model": ErrorResponse, "description": "PROPOSAL_NOT_FOUND"},
    503: {"model": ErrorResponse, "description": "Postgres or Temporal unavailable"},
}
PAGES = Keyset("governance-proposals", whole(2**63))
ProposalIdPath = Annotated[str, Path(pattern=r"^gov_[0-9a-f]{16}$", description="'gov_' and 16 hex digits")]


async def _within_pending_limit(conn, author: str, limit: int) -> None:
    pending = await proposals.undecided_of(conn, author)
    if pending >= limit:
        raise ApiError(
            429,
            "TOO_MANY_PENDING_PROPOSALS",
            f"agent_id '{author}' has {pending} rule proposal(s) not decided yet (limit: {limit}); "
            "propose again once one is decided or has expired",
            extra={"pending": pending, "limit": limit},
        )


def _patched(document: dict, ops: list[dict]) -> dict:
    return rules.normalized(patches.apply(document, ops))


def _bad_ops(error: str, message: str) -> ApiError:
    return ApiError(422, error, f"body.ops: {message}", extra={"errors": [{"field": "body.ops", "message": message}]})


def _shown(row: Any, base: dict[str, Any] | None = None) -> ProposalResponse:
    return ProposalResponse(
        proposal_id=row.id,
        status=row.status,
        author=row.author,
        author_role=row.author_role,
        reason=row.reason,
        base_version=row.base_version,
        base_hash=row.base_hash,
        ops=row.ops,
        candidate_hash=row.candidate_hash,
        diff=patches.diff(base, row.document) if base is not None else row.ops,
        report=row.report,
        report_hash=row.report_hash,
        decided_by=row.decided_by,
        decision_reason=row.decision_reason,
        applied_version=row.applied_version,
        failure=row.failure,
        workflow_id=row.workflow_id,
        created_at=unix(row.created_at),
        expires_at=unix(row.expires_at),
    )


@router.post(
    "/proposals",
    status_code=202,
    response_model=ProposalAccepted,
    responses={
        **ERRORS,
        401: {"model": ErrorResponse, "description": "No key: an agent's X-API-Key or an X-Operator-Key"},
        403: {"model": ErrorResponse, "description": "POLICY_DENIED (rules.propose)"},
        409: {"model": ErrorResponse, "description": "MANIFEST_MOVED: base_hash is not the manifest in force"},
        422: {"model": ErrorResponse, "description": "PATCH_INVALID, MANIFEST_INVALID, NO_CHANGE"},
    },
)
async def propose(
    body: ProposalRequest,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Propose a change of the world's rules: a patch of the manifest in force. Agents need the
    ``rules.propose`` capability; operators may too. It is shadowed (a counterfactual run of the
    world with the candidate rules, beside the baseline) and waits for an operator's approval."""
    operator = await operator_of(services, operator_key)
    if operator is not None:
        role, author = "operator", operator.label
    elif services.settings.auth == "open" and not api_key:
        role, author = "operator", "open-mode"
    else:
        role, author = "agent", (await authenticate(services, api_key)).agent_id
    try:
        async with services.database.connect() as decided:  # the decision is recorded, allow or deny
            decided = await decided.execution_options(isolation_level="AUTOCOMMIT")
            asked = policy.Request(role, "rules.propose", author, resource=f"manifest:{body.base_hash[:16]}")
            await gate.require(services, decided, asked)
        if role == "agent":
            await admission.take_rule_proposal_limit(services, author)
        async with services.database.begin() as conn:
            now = await manifests.current(conn, services.settings)
            if body.base_hash != now.hash:
                raise ApiError(
                    409,
                    "MANIFEST_MOVED",
                    f"base_hash is not the manifest in force (version {now.version}, hash {now.hash})",
                    extra={"version": now.version, "hash": now.hash},
                )
            if role == "agent":
                await _within_pending_limit(conn, author, services.settings.ratelimit.pending_rule_proposals_per_agent)
            try:
                # off the event loop: the budget bounds the work, a thread keeps it from others
                document = await asyncio.to_thread(_patched, now.document, body.ops)
            except patches.PatchError as exc:
                raise _bad_ops("PATCH_INVALID", str(exc)) from None
            except rules.ManifestError as exc:
                raise _bad_ops("MANIFEST_INVALID", f"the patched manifest is not valid: {exc}") from None
            candidate_hash = rules.manifest_hash(document)
            if candidate_hash == now.hash:
                raise _bad_ops("NO_CHANGE", "the patch changes nothing")
            ttl = now.manifest.governance.proposal_ttl_sec
            proposal_id = await proposals.create(
                conn,
                author=author,
                author_role=role,
                reason=body.reason,
                base_version=now.version,
                base_hash=now.hash,
                ops=body.ops,
                document=document,
                candidate_hash=candidate_hash,
                expires_at=datetime.now(UTC) + timedelta(seconds=ttl),
            )
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    workflow_id = proposals.workflow_id(proposal_id)
    try:
        client = await services.temporal()
        await client.start_workflow(
            GOVERNANCE_WORKFLOW,
            GovernanceRequest(proposal_id=proposal_id, ttl_sec=ttl),
            id=workflow_id,
            task_queue=services.settings.task_queue,
            search_attributes=search_attributes(agent_id=author if role == "agent" else None),
        )
    except Exception as exc:  # recorded, never started: it fails, saying why (propose it again)
        async with services.database.begin() as conn:
            await proposals.move(conn, proposal_id, lifecycle.FAILED, failure="its workflow could not be started")
        if isinstance(exc, ApiError):
            raise
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "starting a governance workflow") from exc
    accepted = ProposalAccepted(
        proposal_id=proposal_id,
        status=lifecycle.PROPOSED,
        candidate_hash=candidate_hash,
        workflow_id=workflow_id,
        url=f"/v1/governance/proposals/{proposal_id}",
    )
    return JSONResponse(accepted.model_dump(), status_code=202)


@router.get("/proposals", response_model=ProposalListResponse, responses=paged(ERRORS))
async def list_proposals(
    request: Request,
    response: Response,
    services: ServicesDep,
    status: str | None = Query(None, pattern="^(" + "|".join(lifecycle.STATES) + ")$"),
    limit: int = Query(20, ge=1, le=200),
    cursor: Cursor = None,
) -> ProposalListResponse:
    """Proposals, newest first (public: what the world's rules may become, and why)."""
    after = PAGES.decode(cursor)
    try:
        async with services.database.connect() as conn:
            rows = await proposals.listing(conn, status, limit + 1, after[0] if after else None)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    page, next_cursor = PAGES.page(request, response, rows, limit, lambda r: (r.seq,))
    return ProposalListResponse(proposals=[_shown(r) for r in page], next_cursor=next_cursor)


async def _load(services: Services, proposal_id: str) -> Any:
    try:
        async with services.database.connect() as conn:
            row = await proposals.get(conn, proposal_id)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    if row is None:
        raise ApiError(404, "PROPOSAL_NOT_FOUND", f"no proposal {proposal_id}")
    return row


@router.get("/proposals/{proposal_id}", response_model=ProposalResponse, responses=ERRORS)
async def get_proposal(proposal_id: ProposalIdPath, services: ServicesDep) -> ProposalResponse:
    """A proposal: its patch and the diff it makes, its shadow report and the report's hash (what
    an approval names), the decision and what it applied."""
    row = await _load(services, proposal_id)
    async with services.database.connect() as conn:
        base = await manifests.document_of(conn, row.base_version)
    return _shown(row, base)


async def _signal(services: Services, row: Any, decision: GovernanceDecision) -> None:
    client = await services.temporal()
    try:
        await client.get_workflow_handle(row.workflow_id).signal(GOVERNANCE_DECIDE_SIGNAL, decision)
    except RPCError as exc:
        raise ApiError(409, "PROPOSAL_CLOSED", f"the proposal's workflow is over ({row.status})") from exc


@router.post(
    "/proposals/{proposal_id}/approve",
    status_code=202,
    response_model=DecisionAccepted,
    responses={
        **ERRORS,
        **OPERATOR_ERRORS,
        409: {"model": ErrorResponse, "description": "NOT_AWAITING_APPROVAL, REPORT_MISMATCH"},
    },
)
async def approve(
    proposal_id: ProposalIdPath,
    body: ApproveRequest,
    services: ServicesDep,
    operator: Operator | None = Depends(require_operator),
) -> JSONResponse:
    """Approve a proposal's shadow report (operators only): name the ``report_hash`` you read.
    The workflow then applies the candidate, unless the manifest moved meanwhile."""
    row = await _load(services, proposal_id)
    by = await gate.operator_decides(services, operator, "rules.approve", f"proposal:{proposal_id}")
    if row.status != lifecycle.AWAITING_APPROVAL:
        raise ApiError(409, "NOT_AWAITING_APPROVAL", f"the proposal is {row.status}, not awaiting approval")
    if body.report_hash != row.report_hash:
        raise ApiError(
            409, "REPORT_MISMATCH", f"the proposal's shadow report is {row.report_hash}, not {body.report_hash}"
        )
    await _signal(services, row, GovernanceDecision(decision="approve", by=by, report_hash=body.report_hash))
    answer = DecisionAccepted(proposal_id=proposal_id, decision="approve", status=row.status)
    return JSONResponse(answer.model_dump(), status_code=202)


@router.post(
    "/proposals/{proposal_id}/reject",
    status_code=202,
    response_model=DecisionAccepted,
    responses={**ERRORS, **OPERATOR_ERRORS, 409: {"model": ErrorResponse, "description": "NOT_AWAITING_APPROVAL"}},
)
async def reject(
    proposal_id: ProposalIdPath,
    body: RejectRequest,
    services: ServicesDep,
    operator: Operator | None = Depends(require_operator),
) -> JSONResponse:
    """Reject a proposal (operators only), with a reason."""
    row = await _load(services, proposal_id)
    if row.status not in (lifecycle.PROPOSED, lifecycle.SHADOWING, lifecycle.AWAITING_APPROVAL):
        raise ApiError(409, "NOT_AWAITING_APPROVAL", f"the proposal is {row.status}: it is decided already")
    by = await gate.operator_decides(services, operator, "rules.approve", f"proposal:{proposal_id}")
    await _signal(services, row, GovernanceDecision(decision="reject", by=by, reason=body.reason))
    answer = DecisionAccepted(proposal_id=proposal_id, decision="reject", status=row.status)
    return JSONResponse(answer.model_dump(), status_code=202)
