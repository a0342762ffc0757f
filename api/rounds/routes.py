"""Agents acting in the world through their members, in rounds: ``GET
/v1/world/rounds/current/deadline``, ``POST /v1/world/actions`` and ``GET /v1/world/rounds/{id}``.

The engine runs the rounds (engine/process/rounds.py); the API admits submissions into the accepting one
(rounds/records.py): the code is checked by the gatekeeper, the request by the policy gate
(``actions.submit``), and the idempotency key is the agent's own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from api import gate
from api.auth import API_KEY, authenticate
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses, unavailable
from api.moments import iso_utc
from api.rounds.schemas import ActionAccepted, ActionRequest, DeadlineResponse, RoundResponse, SubmissionItem
from gatekeeper.actions import validate_action
from genesis.db.models import Agent
from governance import policy
from governance.records import manifests
from rounds import records

BETWEEN_ROUNDS_S = 0.1
router = APIRouter(prefix="/v1/world", tags=["rounds"])
ERRORS: Responses = {503: {"model": ErrorResponse, "description": "Postgres unavailable"}}
RoundIdPath = Annotated[int, Path(ge=1, le=2**62)]


@router.get(
    "/rounds/current/deadline",
    response_model=DeadlineResponse,
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "NO_ROUND: the engine has opened none"}},
)
async def current_deadline(services: ServicesDep) -> DeadlineResponse:
    """The round that accepts submissions now, and until when."""
    try:
        async with services.database.connect() as conn:
            row = await records.current(conn)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    if row is None:
        raise ApiError(404, "NO_ROUND", "the engine has not opened a round (is it running with rounds enabled?)")
    left = (row.deadline_at - datetime.now(UTC)).total_seconds()
    return DeadlineResponse(
        round_id=row.round_id,
        state=row.state,
        deadline_utc=iso_utc(row.deadline_at),
        seconds_remaining=round(max(0.0, left), 3) if row.state == records.ACCEPTING else 0.0,
        closes_tick=row.closes_tick,
    )


@router.post(
    "/actions",
    status_code=202,
    response_model=ActionAccepted,
    responses={
        **ERRORS,
        401: {"model": ErrorResponse, "description": "API_KEY_REQUIRED, INVALID_API_KEY"},
        403: {"model": ErrorResponse, "description": "POLICY_DENIED (actions.submit)"},
        409: {
            "model": ErrorResponse,
            "description": "ROUND_NOT_ACCEPTING (with status rejected and the reason), IDEMPOTENCY_KEY_REUSED, "
            "NO_FREE_MEMBER",
        },
        429: {"model": ErrorResponse, "description": "ROUND_QUOTA_EXCEEDED: the agent's submissions to this round"},
        422: {"model": ErrorResponse, "description": "ACTION_INVALID: the gatekeeper refused the code (its log)"},
    },
)
async def submit_action(
    body: ActionRequest, services: ServicesDep, api_key: str | None = Depends(API_KEY)
) -> JSONResponse:
    """Submit your member's action for the round that is accepting. The code defines
    ``agent_action(engine, member_id)``; it runs once when the round closes, in a sandboxed
    process of its own, against a proxy of your member (``engine.member``, ``engine.neighbours``,
    ``engine.resources``) whose methods record actions: ``move``, ``move_towards``, ``eat``,
    ``share``, ``attack``, ``send_message``. The same ``idempotency_key`` with the same code is
    answered the same; with other code it is a 409."""
    agent = await authenticate(services, api_key)
    checked = validate_action(body.code)
    if not checked.ok:
        raise ApiError(
            422,
            "ACTION_INVALID",
            f"the action was refused: {checked.validation_log[-1]}",
            extra={
                "status": "rejected",
                "reason": checked.validation_log[-1],
                "failure_code": checked.failure_code,
                "validation_log": checked.validation_log,
            },
        )
    try:
        retried_between_rounds = False
        for _ in range(3):  # again if its member went back to the pool, or a round was closing
            member_id = await _member_of(services, agent.agent_id)
            async with services.database.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")  # the decision stands alone
                asked = policy.Request("agent", "actions.submit", agent.agent_id, resource=f"member:{member_id}")
                decision_id = await gate.require(services, conn, asked)
            async with services.database.begin() as tx:  # held briefly: closing the round waits for it
                admitted = await records.submit(
                    tx,
                    agent.agent_id,
                    member_id,
                    body.idempotency_key,
                    body.code,
                    decision_id,
                    services.settings.rounds.max_submissions_per_agent,
                )
            if admitted.member_gone:
                continue
            if admitted.reason == records.NOT_ACCEPTING and not retried_between_rounds:
                # a round closing as this one came: the next one opens in the same transaction
                retried_between_rounds = True
                await asyncio.sleep(BETWEEN_ROUNDS_S)
                continue
            break
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    if admitted.conflict:
        raise ApiError(
            409,
            "IDEMPOTENCY_KEY_REUSED",
            f"idempotency_key {body.idempotency_key!r} was used for other code (submission {admitted.submission_id})",
        )
    if admitted.quota:
        retry = await _seconds_to_next_round(services)
        raise ApiError(
            429,
            "ROUND_QUOTA_EXCEEDED",
            admitted.reason or "too many submissions to this round",
            headers={"Retry-After": str(retry)},
            extra={"status": "rejected", "reason": admitted.reason, "round_id": admitted.round_id},
        )
    if admitted.status != records.ACCEPTED or admitted.round_id is None or admitted.submission_id is None:
        raise ApiError(
            409,
            "ROUND_NOT_ACCEPTING",
            records.NOT_ACCEPTING,
            extra={"status": "rejected", "reason": records.NOT_ACCEPTING},
        )
    accepted = ActionAccepted.model_validate(
        {
            "status": "accepted",
            "round_id": admitted.round_id,
            "submission_id": admitted.submission_id,
            "round_url": f"/v1/world/rounds/{admitted.round_id}",
            "submission_status": admitted.submission_status,
        }
    )
    return JSONResponse(accepted.model_dump(), status_code=202)


async def _member_of(services: Services, agent_id: str) -> int:
    """The agent's member; one from the pool at its first action (409 when none is free)."""
    async with services.database.begin() as tx:
        member_id = await tx.scalar(select(Agent.member_id).where(Agent.agent_id == agent_id))
        if member_id is not None:
            return int(member_id)
        rules = (await manifests.current(tx, services.settings)).manifest.rounds
        limit = services.settings.rounds.max_members
        member_id = await records.assign_member(tx, agent_id, limit, rules.member_idle_sec)
    if member_id is None:
        raise ApiError(
            409,
            "NO_FREE_MEMBER",
            f"all {limit} members of the world are held by agents that acted within the last "
            f"{rules.member_idle_sec} s: try again later",
        )
    return member_id


async def _seconds_to_next_round(services: Services) -> int:
    try:
        async with services.database.connect() as conn:
            row = await records.current(conn)
    except (SQLAlchemyError, OSError):
        return 1
    if row is None:
        return 1
    return max(1, int((row.deadline_at - datetime.now(UTC)).total_seconds() + 1))


@router.get(
    "/rounds/{round_id}",
    response_model=RoundResponse,
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "ROUND_NOT_FOUND"}},
)
async def get_round(round_id: RoundIdPath, services: ServicesDep) -> RoundResponse:
    """A round and every submission to it: accepted, then applied (each action's outcome) or
    rejected (with its reason); a settled round names its signed receipt."""
    try:
        async with services.database.connect() as conn:
            row, subs = await records.round_with_submissions(conn, round_id)
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc
    if row is None:
        raise ApiError(404, "ROUND_NOT_FOUND", f"no round {round_id}")
    return RoundResponse(
        round_id=row.round_id,
        state=row.state,
        epoch=row.epoch,
        opens_tick=row.opens_tick,
        closes_tick=row.closes_tick,
        deadline_utc=iso_utc(row.deadline_at),
        settled_tick=row.settled_tick,
        receipt_id=row.receipt_id,
        summary=row.summary,
        submissions=[
            SubmissionItem(
                id=s.id,
                agent_id=s.agent_id,
                member_id=s.member_id,
                hash=s.body_hash,
                status=s.status,
                error=s.error,
                reason=s.detail,
                actions=s.outcomes,
                submitted_at=round(s.submitted_at.timestamp(), 3),
            )
            for s in subs
        ],
    )
