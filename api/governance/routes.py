"""The world's rules and who may act: ``GET /v1/manifest`` (and its history), agents' capability
grants (``/v1/agents/{agent_id}/capabilities``), ``POST /v1/policy/simulate`` and the policy
gate's decisions (``GET /v1/policy/decisions``).

Changing the manifest itself goes through governance (propose → shadow → approve → apply);
granting and revoking capabilities is an operator's act; every gated request's decision is
recorded by the gate (api/gate.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from api.auth import API_KEY, OPERATOR_ERRORS, OPERATOR_KEY, authenticate, operator_of, require_operator
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses, invalid_field, unavailable
from api.governance.schemas import (
    CapabilitiesResponse,
    Capability,
    DecisionItem,
    DecisionListResponse,
    DecisionResponse,
    GrantItem,
    GrantRequest,
    ManifestHistoryResponse,
    ManifestResponse,
    ManifestVersionItem,
    RevokeResponse,
    SimulateRequest,
)
from api.moments import maybe_unix, unix
from api.paging import Cursor, Keyset, paged, whole
from genesis import canonical
from genesis.db.models import Agent, PolicyDecisionRow
from governance import manifest as rules, policy
from governance.records import capabilities, manifests, policy_gate
from identity.operators import Operator

router = APIRouter(tags=["governance"])
ERRORS: Responses = {
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Postgres unavailable"},
}
AGENT_ERRORS: Responses = {**ERRORS, 404: {"model": ErrorResponse, "description": "AGENT_NOT_FOUND"}}
AgentIdPath = Annotated[str, Path(max_length=40, pattern=r"^[A-Za-z0-9_-]+$")]
DECISIONS = Keyset("policy-decisions", whole(2**63))


def _db_down(exc: SQLAlchemyError | OSError) -> ApiError:
    return unavailable("DATABASE_UNAVAILABLE", "Postgres", exc)


@router.get("/v1/manifest", response_model=ManifestResponse, responses=ERRORS)
async def current_manifest(services: ServicesDep) -> ManifestResponse:
    """The world's rules in force: parameters set by governance, the policy, the capabilities a new
    agent gets, which mutations wait for approval, snapshot retention, round length."""
    try:
        async with services.database.begin() as conn:
            now = await manifests.current(conn, services.settings)
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    return ManifestResponse(version=now.version, hash=now.hash, document=now.document)


@router.get("/v1/manifest/history", response_model=ManifestHistoryResponse, responses=ERRORS)
async def manifest_history(services: ServicesDep, limit: int = Query(50, ge=1, le=500)) -> ManifestHistoryResponse:
    """Versions of the manifest, newest first, with what put each in force."""
    try:
        async with services.database.begin() as conn:
            await manifests.current(conn, services.settings)  # version 1 exists from the first read on
            rows = await manifests.history(conn, limit)
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    return ManifestHistoryResponse(
        versions=[
            ManifestVersionItem(version=r.version, hash=r.hash, cause=r.cause, created_at=unix(r.created_at))
            for r in rows
        ]
    )


def _by(operator: Operator | None) -> str:
    return f"operator:{operator.label}" if operator is not None else "operator:open-mode"


async def _known_agent(conn, agent_id: str) -> None:
    if await conn.scalar(select(Agent.agent_id).where(Agent.agent_id == agent_id)) is None:
        raise ApiError(404, "AGENT_NOT_FOUND", f"no registered agent {agent_id}")


async def _capabilities(services: Services, agent_id: str) -> CapabilitiesResponse:
    now = datetime.now(UTC)
    async with services.database.begin() as conn:
        await _known_agent(conn, agent_id)
        grants = await capabilities.grants_of(conn, agent_id)
    items = [
        GrantItem(
            id=g.id,
            capability=g.capability,
            granted_by=g.granted_by,
            granted_at=unix(g.granted_at),
            expires_at=maybe_unix(g.expires_at),
            revoked_at=maybe_unix(g.revoked_at),
            revoked_by=g.revoked_by,
            live=g.revoked_at is None and (g.expires_at is None or g.expires_at > now),
        )
        for g in grants
    ]
    return CapabilitiesResponse(agent_id=agent_id, live=sorted({g.capability for g in items if g.live}), grants=items)


@router.get(
    "/v1/agents/{agent_id}/capabilities",
    response_model=CapabilitiesResponse,
    responses={**AGENT_ERRORS, 401: {"model": ErrorResponse, "description": "No key"}, 403: {"model": ErrorResponse}},
)
async def list_capabilities(
    agent_id: AgentIdPath,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> CapabilitiesResponse:
    """An agent's capability grants: for the agent itself (its X-API-Key) or an operator."""
    operator = await operator_of(services, operator_key)
    if operator is None and services.settings.auth != "open":
        agent = await authenticate(services, api_key)
        if agent.agent_id != agent_id:
            raise ApiError(403, "NOT_YOUR_AGENT", "an agent sees only its own capabilities (or send an X-Operator-Key)")
    try:
        return await _capabilities(services, agent_id)
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc


@router.post(
    "/v1/agents/{agent_id}/capabilities",
    status_code=201,
    response_model=CapabilitiesResponse,
    responses={**AGENT_ERRORS, **OPERATOR_ERRORS},
)
async def grant_capabilities(
    agent_id: AgentIdPath,
    body: GrantRequest,
    services: ServicesDep,
    operator: Operator | None = Depends(require_operator),
) -> CapabilitiesResponse:
    """Grant an agent capabilities (operators only), each until ``ttl_sec`` or revoked."""
    try:
        async with services.database.begin() as conn:
            await _known_agent(conn, agent_id)
            await capabilities.grant(conn, agent_id, body.capabilities, _by(operator), body.ttl_sec)
        return await _capabilities(services, agent_id)
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc


@router.delete(
    "/v1/agents/{agent_id}/capabilities/{capability}",
    response_model=RevokeResponse,
    responses={**AGENT_ERRORS, **OPERATOR_ERRORS},
)
async def revoke_capability(
    agent_id: AgentIdPath,
    capability: Capability,
    services: ServicesDep,
    operator: Operator | None = Depends(require_operator),
) -> RevokeResponse:
    """Revoke an agent's live grants of one capability (operators only); its next gated request
    of that kind is denied."""
    try:
        async with services.database.begin() as conn:
            await _known_agent(conn, agent_id)
            revoked = await capabilities.revoke(conn, agent_id, capability, _by(operator))
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    return RevokeResponse(agent_id=agent_id, capability=capability, revoked=revoked)


@router.post("/v1/policy/simulate", response_model=DecisionResponse, responses={**ERRORS, **OPERATOR_ERRORS})
async def simulate(
    body: SimulateRequest, services: ServicesDep, operator: Operator | None = Depends(require_operator)
) -> DecisionResponse:
    """What the policy would decide for a request, with the manifest in force or a candidate one,
    and the agent's live grants or assumed ones (operators only). Nothing is recorded: a
    simulation is not a decision."""
    try:
        async with services.database.begin() as conn:
            now = await manifests.current(conn, services.settings)
            document = now.document if body.document is None else body.document
            try:
                candidate = rules.validate(document)
            except rules.ManifestError as exc:
                raise invalid_field("body.document", str(exc)) from None
            held: frozenset[str] = frozenset(body.capabilities or ())
            if body.role == "agent" and body.capabilities is None and body.agent_id is not None:
                defaults = list(candidate.capabilities.agent_defaults)
                held = await policy_gate.holdings(conn, services.settings, body.agent_id, defaults)
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    asked = policy.Request(body.role, body.action, body.agent_id, held, body.resource)
    decided = policy.decide(candidate.policy, rules.manifest_hash(candidate.model_dump(mode="json")), asked)
    return DecisionResponse(**decided.to_data(), capabilities=sorted(held))


@router.get("/v1/policy/decisions", response_model=DecisionListResponse, responses=paged({**ERRORS, **OPERATOR_ERRORS}))
async def list_decisions(
    request: Request,
    response: Response,
    services: ServicesDep,
    subject: str | None = Query(None, max_length=128, description="Only decisions about this agent (or operator)"),
    action: str | None = Query(None, max_length=40),
    decision: str | None = Query(None, pattern="^(allow|deny)$"),
    limit: int = Query(50, ge=1, le=500),
    cursor: Cursor = None,
    operator: Operator | None = Depends(require_operator),
) -> DecisionListResponse:
    """The policy gate's decisions, newest first (operators only)."""
    after = DECISIONS.decode(cursor)
    statement = select(PolicyDecisionRow).order_by(PolicyDecisionRow.seq.desc()).limit(limit + 1)
    for column, value in (
        (PolicyDecisionRow.subject, subject),
        (PolicyDecisionRow.action, action),
        (PolicyDecisionRow.decision, decision),
    ):
        if value is not None:
            statement = statement.where(column == value)
    if after is not None:
        statement = statement.where(PolicyDecisionRow.seq < after[0])
    try:
        async with services.sessions() as session:
            rows = list((await session.scalars(statement)).all())
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    page, next_cursor = DECISIONS.page(request, response, rows, limit, lambda r: (r.seq,))
    return DecisionListResponse(decisions=[_decision_item(r) for r in page], next_cursor=next_cursor)


def _decision_item(row: PolicyDecisionRow) -> DecisionItem:
    decided = canonical.decode(row.body)["decision"]
    return DecisionItem(
        id=row.id,
        seq=row.seq,
        decided_at=unix(row.decided_at),
        role=row.role,
        action=row.action,
        subject=row.subject,
        resource=row.resource,
        decision=row.decision,
        rule=row.rule,
        reason=decided["reason"],
        dry_run=decided["dry_run"],
        manifest_hash=row.manifest_hash,
        journal_seq=row.journal_seq,
    )
