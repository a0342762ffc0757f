"""Propose a mutation and follow it: POST /api/mutations/propose (admitted by api/mutations/admission.py),
GET /api/mutations/{id}/status and /effects, POST /api/mutations/{id}/rollback."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select
from temporalio.service import RPCError

from api.auth import API_KEY, OPERATOR_KEY, Reader, acting_agent, operator_of, reader
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, RateLimitResponse, unavailable
from api.metrics import count_proposal
from api.mutations.admission import accept_proposal
from api.mutations.records import (
    MUTATION_ERRORS,
    MUTATION_WRITE_ERRORS,
    load_mutation,
    load_own_mutation,
    load_with_quarantine,
    replaces_ref,
    status_response,
    verdict_reason,
)
from api.mutations.schemas import (
    EffectsResponse,
    MutationStatusResponse,
    ProposeRequest,
    ProposeResponse,
    RollbackBody,
    RollbackResponse,
)
from api.params import MutationIdPath
from genesis.db.models import Mutation, TraitVersion
from genesis.dto import MutationStatus
from pipeline.rollbacks import WorkflowNotRunning, request_rollback

router = APIRouter(prefix="/api/mutations", tags=["mutations"])

CONFLICTS = (
    "TRAIT_EXISTS (trait_name is live: set replaces), TRAIT_NOT_LIVE (replaces names no live trait), "
    "VERSION_CONFLICT (replaces.version is not the live one), TASK_ALREADY_CLAIMED, IDEMPOTENCY_KEY_REUSED"
)


@router.post(
    "/propose",
    status_code=202,
    response_model=ProposeResponse,
    responses={
        **MUTATION_WRITE_ERRORS,
        409: {"model": ErrorResponse, "description": CONFLICTS},
        429: {"model": RateLimitResponse, "description": "A rate limit; retry after retry_after_sec"},
    },
)
async def propose(
    body: ProposeRequest,
    request: Request,
    services: ServicesDep,
    idempotency_key: str | None = Header(
        default=None, max_length=128, description="Retry-safe: same key, same mutation"
    ),
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Submit a trait. It is validated, sandboxed and judged by a durable MutationWorkflow;
    poll the status URL (or watch the workflow in the Temporal UI).

    Needs the agent's ``X-API-Key`` (unless GENESIS_AUTH=open) and is rate limited per agent
    (active mutations, proposals per hour) and per client IP (proposals per minute). A live
    trait is replaced only by the agent that made its live version; an ``X-Operator-Key`` beside
    the agent's key allows replacing anyone's."""
    try:
        operator = await operator_of(services, operator_key)
        agent_id = await acting_agent(services, api_key, body.agent_id)
        accepted = await accept_proposal(
            services,
            request,
            body,
            agent_id,
            idempotency_key,
            operator=operator.label if operator is not None else None,
        )
    except ApiError as exc:
        count_proposal("single", exc.error)
        raise
    count_proposal("single", "accepted")
    return JSONResponse(accepted.model_dump(), status_code=202)


@router.get("/{mutation_id}/status", response_model=MutationStatusResponse, responses=MUTATION_ERRORS)
async def status(
    mutation_id: MutationIdPath, services: ServicesDep, who: Reader = Depends(reader)
) -> MutationStatusResponse:
    """Where a mutation is in its pipeline, with the validation log a person can act on
    (``notify_url`` only for its agent's key or an operator's)."""
    record, quarantine = await load_with_quarantine(services, mutation_id)
    return status_response(record, quarantine, private=who.sees_private_of(record.agent_id))


@router.get("/{mutation_id}/effects", response_model=EffectsResponse, responses=MUTATION_ERRORS)
async def effects(mutation_id: MutationIdPath, services: ServicesDep) -> EffectsResponse:
    """What the mutation did to the world over its observation window (``observed: false`` until then)."""
    record = await load_mutation(services, mutation_id)
    return EffectsResponse(
        mutation_id=record.mutation_id,
        trait_name=record.trait_name,
        status=record.status,
        observation_window_ticks=services.settings.observation.window_ticks,
        observed=record.effects is not None or record.verdict_report is not None,
        effects=record.effects,
        verdict_report=record.verdict_report,
        fitness_verdict=record.fitness_verdict,
        verdict_reason=verdict_reason(record),
        replaces=replaces_ref(record),
        trait_version=record.trait_version,
        replaced_version=record.replaced_version,
        restored_version=record.restored_version,
    )


@router.post(
    "/{mutation_id}/rollback", status_code=202, response_model=RollbackResponse, responses=MUTATION_WRITE_ERRORS
)
async def rollback(
    mutation_id: MutationIdPath,
    services: ServicesDep,
    body: RollbackBody | None = None,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Take a trait out of the world (the previous version of the same trait, if any, comes back).
    Needs the ``X-API-Key`` of the agent that proposed it, or of the agent whose version it
    replaced, or an ``X-Operator-Key`` (unless GENESIS_AUTH=open)."""
    allowed = await load_own_mutation(
        services, mutation_id, api_key, operator_key, "roll it back", replaced_owner_may=True
    )
    record = allowed.record
    reason = body.reason if body else "manual"
    if allowed.by is not None:  # the record says who took another agent's mutation out
        reason = f"{reason} (by {allowed.by})"
    if record.status == MutationStatus.rolled_back.value:
        return _rollback_reply(record.mutation_id, "rolled_back", record.status, "already rolled back", 200)
    if record.status in (MutationStatus.rejected.value, MutationStatus.failed.value):
        raise ApiError(409, "NOT_ROLLBACKABLE", f"mutation {mutation_id} is {record.status}: it never went live")
    if record.status == MutationStatus.extinct.value:
        raise ApiError(
            409, "NOT_ROLLBACKABLE", f"mutation {mutation_id} is extinct: it is not live, there is nothing to roll back"
        )
    note = await _not_live_note(services, record)  # read before the rollback changes the version's status
    client = await services.temporal()
    try:  # a kept mutation's workflow has ended: a RollbackWorkflow does it (pipeline/rollbacks.py)
        await request_rollback(client, services.settings, record, reason)
    except WorkflowNotRunning as exc:
        raise ApiError(
            409, "NOT_ROLLBACKABLE", f"mutation {mutation_id} is {record.status}: its workflow has not started yet"
        ) from exc
    except RPCError as exc:
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "requesting the rollback") from exc
    return _rollback_reply(
        mutation_id, "rollback_requested", record.status, f"rollback requested ({reason}){note}", 202
    )


async def _not_live_note(services: Services, record: Mutation) -> str:
    """For a version that another one has replaced: its rollback changes nothing in the world, say
    so and name the live one (whose rollback is what brings this version back)."""
    async with services.sessions() as session:
        mine = await session.scalar(select(TraitVersion.status).where(TraitVersion.mutation_id == record.mutation_id))
        if mine != "superseded":
            return ""
        live = (
            await session.execute(
                select(TraitVersion.version, TraitVersion.mutation_id).where(
                    TraitVersion.trait_name == record.trait_name, TraitVersion.status == "active"
                )
            )
        ).first()
    now = f"v{live[0]} (mutation {live[1]}) is live" if live is not None else "no version is live"
    return (
        f"; note: v{record.trait_version} was not live ({now}): this rollback only keeps it from being "
        "restored later" + (f"; roll back {live[1]} to take the live version out" if live is not None else "")
    )


def _rollback_reply(mutation_id: str, status: str, previous: str, message: str, code: int) -> JSONResponse:
    body = RollbackResponse(
        mutation_id=mutation_id,
        status=status,  # type: ignore[arg-type]
        previous_status=previous,
        message=message,
        status_url=f"/api/mutations/{mutation_id}/status",
    )
    return JSONResponse(body.model_dump(), status_code=code)
