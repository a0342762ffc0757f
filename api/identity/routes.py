"""Agent identity (external-agents-phase2.md): POST /v1/agents/register, GET /v1/agents/me,
operators' invitations (POST /v1/agents/invitations) and giving a member back
(DELETE /v1/agents/me/member)."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from api.auth import API_KEY, OPERATOR_ERRORS, authenticate, require_operator
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, unavailable
from api.identity.schemas import (
    AgentResponse,
    InvitationRequest,
    InvitationResponse,
    MemberReleased,
    RateLimitUsage,
    RegisterRequest,
    RegisterResponse,
    Reputation,
)
from api.moments import iso_utc
from genesis import redis_keys as keys
from genesis.db.models import Agent, Mutation
from genesis.dto import MutationStatus, terminal_statuses
from governance.records import capabilities, manifests
from identity import apikeys
from identity.operators import Operator
from pipeline import ratelimit
from rounds import records as round_records

router = APIRouter(prefix="/v1/agents", tags=["agents"])
log = logging.getLogger("genesis.api.agents")


@router.post(
    "/register",
    status_code=201,
    response_model=RegisterResponse,
    responses={
        403: {"model": ErrorResponse, "description": "INVITATION_REQUIRED, INVALID_INVITATION"},
        422: {"model": ErrorResponse, "description": "Invalid fields"},
        429: {"model": ErrorResponse, "description": "RATE_LIMIT_EXCEEDED: registrations from this address"},
    },
)
async def register(body: RegisterRequest, request: Request, services: ServicesDep) -> JSONResponse:
    """Register an agent. The answer carries its ``agent_id`` and its API key; the key is shown
    this once (only a hash is stored): send it as ``X-API-Key`` on write endpoints. The agent
    holds the manifest's default capabilities (``GET /v1/agents/{agent_id}/capabilities``); its
    member comes from the pool at its first action. Registrations are limited per address, and
    may need an operator's invitation (``GENESIS_REGISTRATION=invitation``)."""
    ip = request.client.host if request.client else "unknown"
    await _take_registration(services, ip)
    invitation = await _use_invitation(services, body.invitation)
    try:
        agent, issued = await _create_agent(services, body, ip)
    except BaseException:
        if invitation is not None:
            await _give_back(services, *invitation)
        raise
    reply = RegisterResponse(
        agent_id=agent.agent_id,
        api_key=issued.key,
        key_prefix=issued.prefix,
        name=agent.name,
        description=agent.description,
        registered_at=iso_utc(agent.created_at),
        message="Store the api_key now: it is shown only once. Send it as the X-API-Key header.",
    )
    return JSONResponse(reply.model_dump(), status_code=201, headers={"Cache-Control": "no-store"})


async def _create_agent(services: Services, body: RegisterRequest, ip: str) -> tuple[Agent, apikeys.IssuedKey]:
    for _ in range(3):  # a clash of random ids or key prefixes is rare; draw again
        issued = apikeys.issue(services.pepper)
        agent = Agent(
            agent_id=apikeys.new_agent_id(),
            name=body.name,
            description=body.description,
            key_prefix=issued.prefix,
            key_hash=issued.digest,
            key_scheme=apikeys.KEY_SCHEME,
            client_ip=ip,
            created_at=datetime.now(UTC),
        )
        async with services.sessions() as session:
            session.add(agent)
            try:
                await session.flush()
                conn = await session.connection()  # its capabilities, in the same transaction
                rules = await manifests.current(conn, services.settings)
                await capabilities.grant_defaults(conn, agent.agent_id, rules.manifest)
                await session.commit()
                return agent, issued
            except IntegrityError:
                await session.rollback()
    raise ApiError(503, "REGISTRATION_FAILED", "could not allocate a unique agent id; try again")


async def _take_registration(services: Services, ip: str) -> None:
    per_hour = services.settings.ratelimit.registrations_per_ip_hour
    try:
        decision = await ratelimit.take_registration(services.redis, per_hour, ip)
    except RedisError as exc:
        raise unavailable("RATE_LIMITER_UNAVAILABLE", "Redis", exc, "the rate limits") from exc
    if not decision.allowed:
        raise ApiError(
            429,
            "RATE_LIMIT_EXCEEDED",
            decision.describe("", ip),
            headers={"Retry-After": str(decision.retry_after_sec)},
            extra={"retry_after_sec": decision.retry_after_sec},
        )


async def _use_invitation(services: Services, code: str | None) -> tuple[str, bytes, int] | None:
    """Use up ``code`` (checked whenever given): its key, value and remaining ms, to give it back
    should the registration fail. 403 when one is needed and missing, or unknown."""
    if code is None:
        if services.settings.registration == "invitation":
            raise ApiError(
                403,
                "INVITATION_REQUIRED",
                "this server registers agents by invitation: ask an operator for one (`genesis agents invite`) "
                "and send it as `invitation`",
            )
        return None
    key = keys.invitation(hashlib.sha256(code.encode()).hexdigest())
    try:
        async with services.redis.pipeline(transaction=True) as pipe:
            pipe.pttl(key)
            pipe.getdel(key)
            ttl_ms, value = await pipe.execute()
    except RedisError as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "checking the invitation") from exc
    if value is None:
        raise ApiError(403, "INVALID_INVITATION", "the invitation is unknown, used or expired: ask an operator for one")
    return key, value, max(int(ttl_ms), 1000)


async def _give_back(services: Services, key: str, value: bytes, ttl_ms: int) -> None:
    try:
        await services.redis.set(key, value, px=ttl_ms, nx=True)
    except RedisError:
        log.warning("an invitation used by a failed registration could not be given back")


@router.post(
    "/invitations",
    status_code=201,
    response_model=InvitationResponse,
    responses={**OPERATOR_ERRORS, 503: {"model": ErrorResponse, "description": "Redis unavailable"}},
)
async def invite(
    body: InvitationRequest, services: ServicesDep, operator: Operator | None = Depends(require_operator)
) -> JSONResponse:
    """An invitation to register one agent (operator): shown once, used up by the registration
    that names it, expired after ``ttl_sec`` if unused."""
    code = f"inv_{secrets.token_hex(16)}"
    record = json.dumps({"by": operator.label if operator else "open-mode", "note": body.note})
    try:
        await services.redis.set(keys.invitation(hashlib.sha256(code.encode()).hexdigest()), record, ex=body.ttl_sec)
    except RedisError as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "recording the invitation") from exc
    expires = iso_utc(datetime.now(UTC) + timedelta(seconds=body.ttl_sec))
    answer = InvitationResponse(invitation=code, expires_at=expires)
    return JSONResponse(answer.model_dump(), status_code=201, headers={"Cache-Control": "no-store"})


@router.delete(
    "/me/member",
    response_model=MemberReleased,
    responses={401: {"model": ErrorResponse, "description": "Missing or unknown X-API-Key"}},
)
async def give_up_member(services: ServicesDep, api_key: str | None = Depends(API_KEY)) -> MemberReleased:
    """Give your member back to the pool (its number is never another agent's); your next
    action takes a new one."""
    agent = await authenticate(services, api_key)
    try:
        async with services.database.begin() as conn:
            released = await round_records.give_up_member(conn, agent.agent_id)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    return MemberReleased(agent_id=agent.agent_id, released=released)


@router.get(
    "/me",
    response_model=AgentResponse,
    responses={401: {"model": ErrorResponse, "description": "Missing or unknown X-API-Key"}},
)
async def me(services: ServicesDep, api_key: str | None = Depends(API_KEY)) -> AgentResponse:
    """The calling agent (by its ``X-API-Key``): its record, its reputation (counted from its
    mutations) and where it stands against the proposal rate limits."""
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
