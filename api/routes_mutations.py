"""Propose a mutation and follow it: POST /api/mutations/propose, GET /api/mutations/{id}/status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg
from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select
from temporalio.service import RPCError

from api.auth import API_KEY, OPERATOR_KEY, acting_agent, operator_of
from api.errors import ApiError, unavailable
from api.metrics import count_proposal
from api.params import MutationIdPath
from api.routes_tasks import check_proposal_claim
from api.routes_traits import check_replacement, db_down, quarantine_info, replaces_ref
from api.schemas import (
    EffectsResponse,
    ErrorResponse,
    MutationStatusResponse,
    ProposeRequest,
    ProposeResponse,
    RateLimitResponse,
    RollbackBody,
    RollbackResponse,
)
from genesis import netpolicy, proposal_store
from pipeline import ratelimit
from pipeline import webhooks
from genesis.db.models import Mutation, TraitQuarantine, TraitVersion
from genesis.dto import FailureCode, MutationStatus
from genesis.ids import mutation_id_for_idempotency_key, mutation_workflow_id, new_mutation_id
from pipeline.rollbacks import WorkflowNotRunning, request_rollback

router = APIRouter(prefix="/api/mutations", tags=["mutations"])
# Postgres unreachable or failing while admitting a proposal: 503 DATABASE_UNAVAILABLE, nothing recorded.
POSTGRES_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)

ERRORS = {
    400: {"model": ErrorResponse, "description": "Malformed JSON"},
    404: {"model": ErrorResponse, "description": "Unknown mutation"},
    413: {"model": ErrorResponse, "description": "Body too large"},
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "A dependency is unavailable; nothing was recorded"},
}
CONFLICTS = ("TRAIT_EXISTS (trait_name is live: set replaces), TRAIT_NOT_LIVE (replaces names no live trait), "
             "VERSION_CONFLICT (replaces.version is not the live one), TASK_ALREADY_CLAIMED, IDEMPOTENCY_KEY_REUSED")
WRITE_ERRORS = {
    **ERRORS,
    401: {"model": ErrorResponse, "description": "Missing or unknown X-API-Key (GENESIS_AUTH=required), "
          "or an invalid X-Operator-Key"},
    403: {"model": ErrorResponse, "description": "AGENT_ID_MISMATCH (the X-API-Key belongs to another agent), "
          "NOT_YOUR_MUTATION, NOT_TRAIT_OWNER (the live version of the trait is another agent's)"},
}


@router.post(
    "/propose", status_code=202, response_model=ProposeResponse,
    responses={**WRITE_ERRORS, 409: {"model": ErrorResponse, "description": CONFLICTS}, 429: {"model": RateLimitResponse, "description": "A rate limit; retry after retry_after_sec"}},
)
async def propose(
    body: ProposeRequest,
    request: Request,
    idempotency_key: str | None = Header(default=None, max_length=128, description="Retry-safe: same key, same mutation"),
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Submit a trait. It is validated, sandboxed and judged by a durable MutationWorkflow;
    poll the status URL (or watch the workflow in the Temporal UI).

    Needs the agent's ``X-API-Key`` (unless GENESIS_AUTH=open) and is rate limited per agent
    (active mutations, proposals per hour) and per client IP (proposals per minute). A live
    trait is replaced only by the agent that made its live version; an ``X-Operator-Key`` beside
    the agent's key allows replacing anyone's."""
    services = request.app.state.services
    try:
        operator = await operator_of(services, operator_key)
        agent_id = await acting_agent(services, api_key, body.agent_id)
        accepted = await accept_proposal(services, request, body, agent_id, idempotency_key,
                                         operator=operator.label if operator is not None else None)
    except ApiError as exc:
        count_proposal("single", exc.error)
        raise
    count_proposal("single", "accepted")
    return JSONResponse(accepted.model_dump(), status_code=202)


async def accept_proposal(services, request: Request, body: ProposeRequest, agent_id: str,
                          idempotency_key: str | None, operator: str | None = None) -> ProposeResponse:
    """Record a proposal of ``agent_id`` and start its workflow (rate limits taken), or raise the
    ApiError a single proposal would get. Shared by the single and the batch propose.
    ``operator``: the label of the operator key that came with it (it may replace another
    agent's live trait; recorded as the replacement's approval)."""
    if body.notify_url:
        await _check_receiver(services.settings, body.notify_url)
    mutation_id = mutation_id_for_idempotency_key(agent_id, idempotency_key) if idempotency_key else new_mutation_id()
    try:  # one pooled connection for the whole admission (genesis/proposal_store.py: why)
        async with proposal_store.connection(services.pg) as conn:
            return await _admit(services, conn, request, body, agent_id, idempotency_key, mutation_id, operator)
    except POSTGRES_ERRORS as exc:
        raise db_down(exc) from exc


async def _check_receiver(settings, notify_url: str) -> None:
    """422 for a notify_url whose host is, or resolves to, an address deliveries would refuse. A
    name that does not resolve now is accepted: deliveries check (and retry) it again."""
    try:
        await webhooks.receiver(notify_url, netpolicy.NetPolicy.from_settings(settings, webhooks=True))
    except netpolicy.Unresolvable:
        return
    except netpolicy.Refused as exc:
        raise ApiError(422, "VALIDATION_ERROR", f"notify_url: {exc}",
                       extra={"errors": [{"field": "notify_url", "message": str(exc)}]}) from None


async def _admit(services, conn, request: Request, body: ProposeRequest, agent_id: str,
                 idempotency_key: str | None, mutation_id: str, operator: str | None) -> ProposeResponse:
    if idempotency_key:  # a retry of an accepted proposal is answered without touching the limits
        existing = await proposal_store.proposal(conn, mutation_id)
        if existing is not None:
            return _same_proposal(existing, body)
    # 403 NOT_TRAIT_OWNER, 409 TRAIT_EXISTS / TRAIT_NOT_LIVE / VERSION_CONFLICT
    target = await check_replacement(services, conn, body, agent_id, operator)
    await check_proposal_claim(request, body.task_id, agent_id)  # 409 if another agent holds the task
    ip = request.client.host if request.client else "unknown"
    decision = await _take_rate_limit(services, agent_id, ip, mutation_id)
    record = Mutation(
        mutation_id=mutation_id, agent_id=agent_id, task_id=body.task_id, trait_name=body.trait_name,
        goal=body.goal, code=body.code, status=MutationStatus.queued.value, validation_log=[],
        workflow_id=mutation_workflow_id(mutation_id), client_ip=request.client.host if request.client else None,
        notify_url=body.notify_url, **target.record_fields(),
    )
    try:
        inserted = await proposal_store.insert_proposal(
            conn, mutation_id=record.mutation_id, agent_id=record.agent_id, task_id=record.task_id,
            trait_name=record.trait_name, goal=record.goal, code=record.code, workflow_id=record.workflow_id,
            client_ip=record.client_ip, notify_url=record.notify_url, replaces_trait=record.replaces_trait,
            replaces_version=record.replaces_version, replacement_approved_by=record.replacement_approved_by,
        )
    except Exception:  # nothing was recorded: give the quota back
        if not decision.already_held:
            await ratelimit.refund(services.redis, agent_id, ip, mutation_id)
        raise
    if not inserted:  # the same Idempotency-Key again: answer with the existing mutation
        # (a concurrent request with that key recorded it first; the slot taken is its slot)
        return _same_proposal(await proposal_store.proposal(conn, mutation_id), body)
    # Recorded = accepted: the workflow starts right after the answer (api/workflow_starter.py),
    # or, if Temporal is unavailable now, when the sweeper finds the row still queued.
    services.starter.start_soon(record)
    return _accepted(mutation_id, MutationStatus.queued.value, "Mutation accepted for validation")


async def _take_rate_limit(services, agent_id: str, ip: str, mutation_id: str) -> ratelimit.Decision:
    settings = services.settings
    limits = ratelimit.Limits(
        active_per_agent=settings.ratelimit.active_per_agent,
        per_ip_minute=settings.ratelimit.proposals_per_ip_minute,
        per_agent_hour=settings.ratelimit.proposals_per_agent_hour,
        active_slot_ttl_s=settings.ratelimit.active_slot_ttl_s,
        active_retry_after_s=settings.ratelimit.active_retry_after_s,
    )
    try:
        decision = await ratelimit.acquire(services.redis, limits, agent_id, ip, mutation_id)
    except Exception as exc:  # limits cannot be enforced: accept nothing
        raise unavailable("RATE_LIMITER_UNAVAILABLE", "Redis", exc, "the rate limits") from exc
    if not decision.allowed:
        raise ApiError(
            429, FailureCode.RATE_LIMIT_EXCEEDED.value, decision.describe(agent_id, ip),
            headers={"Retry-After": str(decision.retry_after_sec)},
            extra={"retry_after_sec": decision.retry_after_sec},
        )
    return decision


def _same_proposal(existing: Mapping | None, body: ProposeRequest) -> ProposeResponse:
    """``existing``: the recorded proposal (proposal_store.proposal)."""
    replaces = (body.replaces.trait_name, body.replaces.version) if body.replaces else (None, None)
    if (existing is None or existing["code"] != body.code or existing["trait_name"] != body.trait_name
            or (existing["replaces_trait"], existing["replaces_version"]) != replaces):
        raise ApiError(409, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used for a different proposal")
    return _accepted(existing["mutation_id"], existing["status"], "Mutation already accepted (same Idempotency-Key)")


def _accepted(mutation_id: str, status: str, message: str) -> ProposeResponse:
    return ProposeResponse(
        mutation_id=mutation_id, status=status, message=message,
        status_url=f"/api/mutations/{mutation_id}/status", workflow_id=mutation_workflow_id(mutation_id),
    )


async def _load(request: Request, mutation_id: str) -> Mutation:
    """The mutation of a well-formed id (a path parameter: api/params.py), or 404."""
    return (await _load_with_quarantine(request, mutation_id))[0]


async def _load_with_quarantine(request: Request, mutation_id: str) -> tuple[Mutation, TraitQuarantine | None]:
    """The mutation's record and the engine's quarantine record of its trait (None: none)."""
    async with request.app.state.services.sessions() as session:
        found = (await session.execute(
            select(Mutation, TraitQuarantine)
            .outerjoin(TraitQuarantine, TraitQuarantine.mutation_id == Mutation.mutation_id)
            .where(Mutation.mutation_id == mutation_id)
        )).first()
    if found is None:
        raise ApiError(404, "MUTATION_NOT_FOUND", f"no mutation {mutation_id!r}")
    return found[0], found[1]


@dataclass(frozen=True)
class Authorised:
    """A mutation and who may act on it, and why: its own agent, an operator, or (rollback only)
    the agent whose version it replaced. ``by`` names the latter two for the record."""

    record: Mutation
    by: str | None = None


async def load_own_mutation(request: Request, mutation_id: str, api_key: str | None, operator_key: str | None,
                            action: str, *, replaced_owner_may: bool = False) -> Authorised:
    """The mutation, if the caller may act on it: an operator (X-Operator-Key) on any mutation;
    an agent on its own; with ``replaced_owner_may``, also the agent that made the version this
    mutation replaced (the owner of v1 may take out another agent's v2). Any caller in
    GENESIS_AUTH=open without a key."""
    services = request.app.state.services
    operator = await operator_of(services, operator_key)
    caller = None
    if operator is None and (api_key or services.settings.auth == "required"):
        caller = await acting_agent(services, api_key, None)
    record = await _load(request, mutation_id)
    if operator is not None:
        return Authorised(record, by=operator.label)
    if caller is None or caller == record.agent_id:
        return Authorised(record)
    replaced = await _replaced_version_owner(request, record) if replaced_owner_may else None
    if replaced is not None and replaced[1] == caller:
        return Authorised(record, by=f"agent '{caller}', owner of the replaced v{replaced[0]}")
    also = " or the agent whose version it replaced" if replaced_owner_may else ""
    raise ApiError(403, "NOT_YOUR_MUTATION",
                   f"mutation {mutation_id} belongs to agent '{record.agent_id}'; only it{also} (or an operator, "
                   f"with X-Operator-Key) may {action}")


async def _replaced_version_owner(request: Request, record: Mutation) -> tuple[int, str | None] | None:
    """(version, agent_id) of the version ``record`` replaced: the one its activation superseded,
    or, before activation, the one its ``replaces`` names (the live one when no version was named)."""
    if record.replaced_version is None and record.replaces_trait is None:
        return None
    query = (select(TraitVersion.version, Mutation.agent_id)
             .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
             .where(TraitVersion.trait_name == record.trait_name))
    version = record.replaced_version if record.replaced_version is not None else record.replaces_version
    if version is not None:
        query = query.where(TraitVersion.version == version)
    elif record.trait_version is None:  # not activated yet, replaces whatever is live
        query = query.where(TraitVersion.status == "active")
    else:  # activated without replacing anything
        return None
    async with request.app.state.services.sessions() as session:
        row = (await session.execute(query)).first()
    return (row[0], row[1]) if row is not None else None


@router.get("/{mutation_id}/status", response_model=MutationStatusResponse, responses=ERRORS)
async def status(mutation_id: MutationIdPath, request: Request) -> MutationStatusResponse:
    """Where a mutation is in its pipeline, with the validation log a person can act on."""
    return status_response(*await _load_with_quarantine(request, mutation_id))


def status_response(record: Mutation, quarantine: TraitQuarantine | None = None) -> MutationStatusResponse:
    """The status shape of one mutation row (shared with the list, GET /api/mutations), with
    the engine's quarantine record of its trait, if any."""
    return MutationStatusResponse(
        mutation_id=record.mutation_id, trait_name=record.trait_name, agent_id=record.agent_id,
        status=record.status, failure_reason_code=record.failure_reason_code,
        created_at=record.created_at.timestamp(), updated_at=record.updated_at.timestamp(),
        validation_log=record.validation_log or [], goal=record.goal, task_id=record.task_id,
        code_hash=record.code_hash, workflow_id=record.workflow_id, sandbox_report=record.sandbox_report,
        trait_version=record.trait_version, fitness_verdict=record.fitness_verdict,
        rollback_reason=record.rollback_reason, notify_url=record.notify_url,
        replaces=replaces_ref(record), replaced_version=record.replaced_version,
        restored_version=record.restored_version, replacement_approved_by=record.replacement_approved_by,
        quarantine=quarantine_info(quarantine),
    )


@router.get("/{mutation_id}/effects", response_model=EffectsResponse, responses=ERRORS)
async def effects(mutation_id: MutationIdPath, request: Request) -> EffectsResponse:
    """What the mutation did to the world over its observation window (``observed: false`` until then)."""
    record = await _load(request, mutation_id)
    return EffectsResponse(
        mutation_id=record.mutation_id, trait_name=record.trait_name, status=record.status,
        observation_window_ticks=request.app.state.services.settings.observation.window_ticks,
        observed=record.effects is not None, effects=record.effects, fitness_verdict=record.fitness_verdict,
        replaces=replaces_ref(record), trait_version=record.trait_version,
        replaced_version=record.replaced_version, restored_version=record.restored_version,
    )


@router.post("/{mutation_id}/rollback", status_code=202, response_model=RollbackResponse, responses=WRITE_ERRORS)
async def rollback(mutation_id: MutationIdPath, request: Request, body: RollbackBody | None = None,
                   api_key: str | None = Depends(API_KEY), operator_key: str | None = Depends(OPERATOR_KEY)) -> JSONResponse:
    """Take a trait out of the world (the previous version of the same trait, if any, comes back).
    Needs the ``X-API-Key`` of the agent that proposed it, or of the agent whose version it
    replaced, or an ``X-Operator-Key`` (unless GENESIS_AUTH=open)."""
    services = request.app.state.services
    allowed = await load_own_mutation(request, mutation_id, api_key, operator_key, "roll it back",
                                      replaced_owner_may=True)
    record = allowed.record
    reason = body.reason if body else "manual"
    if allowed.by is not None:  # the record says who took another agent's mutation out
        reason = f"{reason} (by {allowed.by})"
    if record.status == MutationStatus.rolled_back.value:
        return _rollback_reply(record.mutation_id, record.status, "already rolled back", 200)
    if record.status in (MutationStatus.rejected.value, MutationStatus.failed.value):
        raise ApiError(409, "NOT_ROLLBACKABLE", f"mutation {mutation_id} is {record.status}: it never went live")
    note = await _not_live_note(request, record)  # read before the rollback changes the version's status
    client = await services.temporal()
    try:  # a kept mutation's workflow has ended: a RollbackWorkflow does it (pipeline/rollbacks.py)
        await request_rollback(client, services.settings, record, reason)
    except WorkflowNotRunning as exc:
        raise ApiError(409, "NOT_ROLLBACKABLE",
                       f"mutation {mutation_id} is {record.status}: its workflow has not started yet") from exc
    except RPCError as exc:
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "requesting the rollback") from exc
    return _rollback_reply(mutation_id, record.status, f"rollback requested ({reason}){note}", 202)


async def _not_live_note(request: Request, record: Mutation) -> str:
    """For a version that another one has replaced: its rollback changes nothing in the world, say
    so and name the live one (whose rollback is what brings this version back)."""
    async with request.app.state.services.sessions() as session:
        mine = await session.scalar(select(TraitVersion.status).where(TraitVersion.mutation_id == record.mutation_id))
        if mine != "superseded":
            return ""
        live = (await session.execute(
            select(TraitVersion.version, TraitVersion.mutation_id)
            .where(TraitVersion.trait_name == record.trait_name, TraitVersion.status == "active"))).first()
    now = f"v{live[0]} (mutation {live[1]}) is live" if live is not None else "no version is live"
    return (f"; note: v{record.trait_version} was not live ({now}): this rollback only keeps it from being "
            "restored later" + (f"; roll back {live[1]} to take the live version out" if live is not None else ""))


def _rollback_reply(mutation_id: str, status: str, message: str, code: int) -> JSONResponse:
    body = RollbackResponse(mutation_id=mutation_id, status=status, message=message)
    return JSONResponse(body.model_dump(), status_code=code)
