"""Agent identity (external-agents-phase2.md): POST /v1/agents/register, GET /v1/agents/me."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from api.auth import API_KEY, authenticate
from api.errors import ApiError
from api.moments import iso_utc
from api.schemas import (
    AgentResponse,
    ErrorResponse,
    RateLimitUsage,
    RegisterRequest,
    RegisterResponse,
    Reputation,
)
from genesis.db.models import Agent, Mutation
from genesis.dto import MutationStatus, terminal_statuses
from pipeline import apikeys, capabilities, manifests, ratelimit, rounds

router = APIRouter(prefix="/v1/agents", tags=["agents"])


@router.post(
    "/register",
    status_code=201,
    response_model=RegisterResponse,
    responses={
        409: {"model": ErrorResponse, "description": "NO_FREE_MEMBER: every member of the world is taken"},
        422: {"model": ErrorResponse, "description": "Invalid fields"},
    },
)
async def register(body: RegisterRequest, request: Request) -> JSONResponse:
    """Register an agent. The answer carries its ``agent_id`` and its API key; the key is shown
    this once (only a hash is stored): send it as ``X-API-Key`` on write endpoints. The agent
    holds the manifest's default capabilities (``GET /v1/agents/{agent_id}/capabilities``)."""
    services = request.app.state.services
    for _ in range(3):  # a clash of random ids or key prefixes is rare; draw again
        issued = apikeys.issue(services.pepper)
        agent = Agent(
            agent_id=apikeys.new_agent_id(),
            name=body.name,
            description=body.description,
            key_prefix=issued.prefix,
            key_hash=issued.digest,
            key_scheme=apikeys.KEY_SCHEME,
            client_ip=request.client.host if request.client else None,
            created_at=datetime.now(UTC),
        )
        async with services.sessions() as session:
            session.add(agent)
            try:
                await session.flush()
                conn = await session.connection()  # its member and capabilities, in the same transaction
                member_id = await rounds.assign_member(conn, agent.agent_id, services.settings.rounds.max_members)
                if member_id is None:
                    await session.rollback()
                    raise ApiError(
                        409,
                        "NO_FREE_MEMBER",
                        f"all {services.settings.rounds.max_members} members of the world are taken; "
                        "an agent needs a member to act through",
                    )
                rules = await manifests.current(conn, services.settings)
                await capabilities.grant_defaults(conn, agent.agent_id, rules.manifest)
                await session.commit()
                break
            except IntegrityError:
                await session.rollback()
    else:
        raise ApiError(503, "REGISTRATION_FAILED", "could not allocate a unique agent id; try again")
    reply = RegisterResponse(
        agent_id=agent.agent_id,
        api_key=issued.key,
        key_prefix=issued.prefix,
        name=agent.name,
        description=agent.description,
        registered_at=iso_utc(agent.created_at),
        member_id=member_id,
        message="Store the api_key now: it is shown only once. Send it as the X-API-Key header.",
    )
    return JSONResponse(reply.model_dump(), status_code=201, headers={"Cache-Control": "no-store"})


@router.get(
    "/me",
    response_model=AgentResponse,
    responses={401: {"model": ErrorResponse, "description": "Missing or unknown X-API-Key"}},
)
async def me(request: Request, api_key: str | None = Depends(API_KEY)) -> AgentResponse:
    """The calling agent (by its ``X-API-Key``): its record, its reputation (counted from its
    mutations) and where it stands against the proposal rate limits."""
    services = request.app.state.services
    agent = await authenticate(services, api_key)
    settings = services.settings
    terminal = [s.value for s in terminal_statuses(settings.activate_mutations)]
    status = Mutation.status
    async with services.sessions() as session:
        row = (
            await session.execute(
                select(
                    func.count(),
                    func.count().filter(status.not_in(terminal)),
                    func.count().filter(Mutation.activated_at.is_not(None)),
                    func.count().filter(status == MutationStatus.kept.value),
                    func.count().filter(status == MutationStatus.rolled_back.value),
                    func.count().filter(status == MutationStatus.rejected.value),
                    func.count().filter(status == MutationStatus.failed.value),
                ).where(Mutation.agent_id == agent.agent_id)
            )
        ).one()
    usage = await ratelimit.usage(services.redis, agent.agent_id)
    return AgentResponse(
        agent_id=agent.agent_id,
        name=agent.name,
        description=agent.description,
        key_prefix=agent.key_prefix,
        registered_at=iso_utc(agent.created_at),
        member_id=agent.member_id,
        reputation=Reputation(
            proposed=row[0],
            active=row[1],
            activated=row[2],
            kept=row[3],
            rolled_back=row[4],
            rejected=row[5],
            failed=row[6],
        ),
        rate_limits=RateLimitUsage(
            active_mutations=usage["active"],
            active_limit=settings.ratelimit.active_per_agent,
            proposals_this_hour=usage["proposals_this_hour"],
            hourly_limit=settings.ratelimit.proposals_per_agent_hour,
            hour_resets_in_sec=usage["hour_resets_in_sec"],
            per_ip_minute_limit=settings.ratelimit.proposals_per_ip_minute,
        ),
    )
