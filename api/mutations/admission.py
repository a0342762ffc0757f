"""Admitting a proposal: the checks and the record behind POST /api/mutations/propose and each
item of POST /api/mutations/propose/batch; and the same checks, without the record, for
POST /api/mutations/check (``check_target``, ``take_check_limit``).

The admission's Postgres work (the Idempotency-Key lookup, the live-trait check of ``replaces`` /
TRAIT_EXISTS, the insert) runs as SQLAlchemy Core statements on one connection of the process's
engine (genesis/db/session.py), held for the whole admission, in autocommit: each statement is
atomic alone and none needs another's uncommitted write (activation checks the live version and
its owner again in its own transaction), so a transaction would only add BEGIN and COMMIT round
trips. With the pool's checkout free of pings, a proposal costs 2 round trips (3 with an
Idempotency-Key) and the policy gate's (the manifest in force, the agent's grants, the decision's
record: api/gate.py); asyncpg prepares each statement once per connection. A concurrent retry with
the same Idempotency-Key is ``INSERT ... ON CONFLICT DO NOTHING`` and answers with the row
recorded first.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from redis.exceptions import RedisError
from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api import gate
from api.errors import ApiError, unavailable
from api.mutations.schemas import ProposeRequest, ProposeResponse, TraitSubmission
from evolution import tasks
from genesis import netpolicy
from genesis.db.models import Mutation, TraitVersion
from genesis.dto import FailureCode, MutationStatus, ParentVersion, TraitRef
from genesis.ids import mutation_id_for_idempotency_key, mutation_workflow_id, new_mutation_id
from governance import policy
from pipeline import lineage, ratelimit, webhooks

# Postgres unreachable or failing while admitting a proposal: 503 DATABASE_UNAVAILABLE, nothing
# recorded. The driver's errors arrive wrapped by SQLAlchemy; a refused or timed-out connect as OSError.
POSTGRES_ERRORS = (SQLAlchemyError, OSError)

_LIVE_TRAIT = (
    select(TraitVersion.version, TraitVersion.mutation_id, Mutation.agent_id)
    .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
    .where(TraitVersion.trait_name == bindparam("trait_name"), TraitVersion.status == "active")
)
_LATEST_TRAIT = (
    select(TraitVersion.version, TraitVersion.status)
    .where(TraitVersion.trait_name == bindparam("trait_name"))
    .order_by(TraitVersion.version.desc())
    .limit(1)
)
_PROPOSAL = select(
    Mutation.mutation_id,
    Mutation.status,
    Mutation.code,
    Mutation.trait_name,
    Mutation.replaces_trait,
    Mutation.replaces_version,
).where(Mutation.mutation_id == bindparam("mutation_id"))
_INSERT = insert(Mutation).on_conflict_do_nothing(index_elements=[Mutation.mutation_id]).returning(Mutation.mutation_id)


@asynccontextmanager
async def _connection(database: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One pooled connection in autocommit (see the module doc); back to the pool afterwards."""
    async with database.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


async def warm(database: AsyncEngine, connections: int) -> None:
    """Open ``connections`` connections and run the lookups once on each (an empty name matches
    nothing), which compiles the statements and prepares them on those connections, so the first
    proposals pay for neither. Run in the background at startup: Postgres may be down, and then
    the first proposals connect (or answer 503)."""

    async def prepare() -> None:
        async with _connection(database) as conn:
            await conn.execute(_LIVE_TRAIT, {"trait_name": ""})
            await conn.execute(_PROPOSAL, {"mutation_id": ""})

    await asyncio.gather(*(prepare() for _ in range(connections)))


async def accept_proposal(
    services,
    request: Request,
    body: ProposeRequest,
    agent_id: str,
    idempotency_key: str | None,
    operator: str | None = None,
) -> ProposeResponse:
    """Record a proposal of ``agent_id`` and start its workflow (rate limits taken), or raise the
    ApiError a single proposal would get. ``operator``: the label of the operator key that came
    with it (it may replace another agent's live trait; recorded as the replacement's approval)."""
    if body.notify_url:
        await _check_receiver(services.settings, body.notify_url)
    mutation_id = mutation_id_for_idempotency_key(agent_id, idempotency_key) if idempotency_key else new_mutation_id()
    try:
        async with _connection(services.database) as conn:
            return await _admit(services, conn, request, body, agent_id, idempotency_key, mutation_id, operator)
    except POSTGRES_ERRORS as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc


async def _check_receiver(settings, notify_url: str) -> None:
    """422 for a notify_url whose host is, or resolves to, an address deliveries would refuse. A
    name that does not resolve now is accepted: deliveries check (and retry) it again."""
    try:
        await webhooks.receiver(notify_url, netpolicy.NetPolicy.from_settings(settings, webhooks=True))
    except netpolicy.Unresolvable:
        return
    except netpolicy.Refused as exc:
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            f"notify_url: {exc}",
            extra={"errors": [{"field": "notify_url", "message": str(exc)}]},
        ) from None


async def _admit(
    services,
    conn: AsyncConnection,
    request: Request,
    body: ProposeRequest,
    agent_id: str,
    idempotency_key: str | None,
    mutation_id: str,
    operator: str | None,
) -> ProposeResponse:
    if idempotency_key:  # a retry of an accepted proposal is answered without touching the limits
        existing = (await conn.execute(_PROPOSAL, {"mutation_id": mutation_id})).first()
        if existing is not None:
            return _same_proposal(existing, body)
    # 403 NOT_TRAIT_OWNER, 409 TRAIT_EXISTS / TRAIT_NOT_LIVE / VERSION_CONFLICT
    target = await _check_replacement(services, conn, body, agent_id, operator)
    # 403 POLICY_DENIED (the decision is recorded either way)
    action = "traits.modify" if target.replaces is not None else "traits.propose"
    await gate.require(services, conn, policy.Request("agent", action, agent_id, resource=f"trait:{body.trait_name}"))
    await _check_task_claim(services, body.task_id, agent_id)  # 409 if another agent holds the task
    ip = request.client.host if request.client else "unknown"
    decision = await _take_rate_limit(services, agent_id, ip, mutation_id)
    row = {
        "mutation_id": mutation_id,
        "agent_id": agent_id,
        "task_id": body.task_id,
        "trait_name": body.trait_name,
        "goal": body.goal,
        "code": body.code,
        "status": MutationStatus.queued.value,
        "validation_log": [],
        "workflow_id": mutation_workflow_id(mutation_id),
        "client_ip": request.client.host if request.client else None,
        "notify_url": body.notify_url,
        "replaces_trait": None,
        "replaces_version": None,
        **target.record_fields(),
    }
    try:
        inserted = (await conn.execute(_INSERT, row)).first() is not None
    except Exception:  # nothing was recorded: give the quota back
        if not decision.already_held:
            await ratelimit.refund(services.redis, agent_id, ip, mutation_id)
        raise
    if not inserted:  # the same Idempotency-Key again: answer with the existing mutation
        # (a concurrent request with that key recorded it first; the slot taken is its slot)
        return _same_proposal((await conn.execute(_PROPOSAL, {"mutation_id": mutation_id})).first(), body)
    # Recorded = accepted: the workflow starts right after the answer (api/workflow_starter.py),
    # or, if Temporal is unavailable now, when the sweeper finds the row still queued.
    services.starter.start_soon(Mutation(**row))
    return _accepted(mutation_id, MutationStatus.queued.value, "Mutation accepted for validation")


# -- what the proposal does to its trait ----------------------------------------------------------


@dataclass(frozen=True)
class ProposalTarget:
    """What a proposal does to its trait, as checked at propose time: modify the live version
    (``replaces``) or add a new trait (``require_new``: activation refuses to overwrite one that
    went live meanwhile — GENESIS_TRAIT_EXISTS_POLICY=reject); ``approved_by``: the operator who
    allowed it to replace a version another agent made (activation checks the owner again)."""

    replaces: TraitRef | None = None
    require_new: bool = False
    approved_by: str | None = None
    parent: ParentVersion | None = None  # the live version it replaces: its lineage's parent

    def record_fields(self) -> dict[str, Any]:
        """Columns of the mutation record."""
        fields: dict[str, Any] = {
            "replacement_approved_by": self.approved_by,
            "lineage": lineage.agent_lineage(self.parent),
        }
        if self.replaces is not None:
            fields.update(replaces_trait=self.replaces.trait_name, replaces_version=self.replaces.version)
        return fields


async def check_target(services, body: TraitSubmission, agent_id: str, operator: str | None) -> ProposalTarget:
    """The trait checks of a proposal alone (403 NOT_TRAIT_OWNER, 409 TRAIT_EXISTS / TRAIT_NOT_LIVE
    / VERSION_CONFLICT), reading only: what POST /api/mutations/check answers before its test."""
    try:
        async with _connection(services.database) as conn:
            return await _check_replacement(services, conn, body, agent_id, operator)
    except POSTGRES_ERRORS as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc) from exc


async def _check_replacement(
    services, conn: AsyncConnection, body: TraitSubmission, agent_id: str, operator: str | None
) -> ProposalTarget:
    """Before any limit is charged: ``replaces`` must name a live trait (409 TRAIT_NOT_LIVE) at
    the given version, if any (409 VERSION_CONFLICT); without ``replaces`` a live trait_name is
    409 TRAIT_EXISTS unless GENESIS_TRAIT_EXISTS_POLICY=replace. A live version is replaced only
    by its owner, or with an ``operator``'s approval (the label of the X-Operator-Key that came
    with it; else 403 NOT_TRAIT_OWNER). The answer only reflects the moment of the proposal:
    activation checks the version and its owner again."""
    name = body.trait_name
    reject_existing = services.settings.trait.exists_policy == "reject"
    may_replace = body.replaces is not None or not reject_existing
    approved_by = operator if may_replace else None
    live = (await conn.execute(_LIVE_TRAIT, {"trait_name": name})).first()
    if live is not None and may_replace and approved_by is None:
        _check_owner(name, live, agent_id)
    if body.replaces is None and not reject_existing:  # replaces the live version, if there is one
        return ProposalTarget(approved_by=approved_by, parent=_parent(name, live))
    if body.replaces is None:
        if live is not None:
            raise ApiError(
                409,
                "TRAIT_EXISTS",
                f"trait '{name}' is live as v{live.version} (mutation {live.mutation_id}); to modify it, "
                f'propose with "replaces": {{"trait_name": "{name}", "version": {live.version}}} (read it '
                f"first: GET /api/traits/{name}), or choose another trait_name for a new trait",
                extra={"live_version": live.version},
            )
        return ProposalTarget(require_new=True)
    if live is None:
        latest = (await conn.execute(_LATEST_TRAIT, {"trait_name": name})).first()
        why = (
            f"no version of trait '{name}' was ever activated"
            if latest is None
            else f"trait '{name}' has no live version (v{latest.version} is {latest.status})"
        )
        raise ApiError(
            409,
            "TRAIT_NOT_LIVE",
            f"{why}: there is nothing to replace; propose it without replaces to add it as a new trait "
            "(GET /api/traits lists the live traits)",
        )
    wanted = body.replaces.version
    if wanted is not None and wanted != live.version:
        raise ApiError(
            409,
            "VERSION_CONFLICT",
            f"replaces.version is {wanted}, but trait '{name}' is live as v{live.version} "
            f"(mutation {live.mutation_id}); read GET /api/traits/{name} and base your change on "
            f"v{live.version}",
            extra={"live_version": live.version},
        )
    return ProposalTarget(
        replaces=TraitRef(trait_name=name, version=wanted), approved_by=approved_by, parent=_parent(name, live)
    )


def _parent(name: str, live: Row | None) -> ParentVersion | None:
    """The live version ``live`` (a row of _LIVE_TRAIT) as a lineage parent."""
    return lineage.parent_version(name, live.version, live.mutation_id) if live is not None else None


def _check_owner(name: str, live: Row, agent_id: str) -> None:
    """403 unless ``agent_id`` made the live version ``live`` (a row of _LIVE_TRAIT)."""
    owner = live.agent_id
    if owner == agent_id:
        return
    made_by = f"agent '{owner}'" if owner else "no registered agent"
    raise ApiError(
        403,
        "NOT_TRAIT_OWNER",
        f"trait '{name}' is live as v{live.version} (mutation {live.mutation_id}), made by {made_by}: only "
        f"the agent that made the live version, or an operator (X-Operator-Key), may replace it; propose your "
        f"variant under another trait_name",
        extra={"live_version": live.version, "owner_agent_id": owner},
    )


# -- the task it answers, the rate limits, the idempotent answer ------------------------------------


async def _check_task_claim(services, task_id: str | None, agent_id: str) -> None:
    """A proposal for a task claimed by another agent is refused (409); one from the claimant
    renews the claim's lease."""
    if not task_id:
        return
    try:
        outcome = await tasks.check_proposal(services.redis, task_id, agent_id, services.settings.task.claim_lease_s)
    except (RedisError, OSError) as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc) from exc
    if outcome.code == tasks.PROPOSAL_CLAIMED_BY_OTHER:
        raise ApiError(
            409,
            "TASK_ALREADY_CLAIMED",
            f"task {task_id!r} is claimed by agent {outcome.holder!r} for another {outcome.lease_remaining_s:.0f} s; "
            "only the claimant may propose for it (drop task_id, or wait for the lease to lapse)",
            headers={"Retry-After": str(max(1, math.ceil(outcome.lease_remaining_s)))},
        )


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
        raise _over_limit(decision, agent_id, ip)
    return decision


async def take_check_limit(services, agent_id: str, ip: str) -> None:
    """Count a check (POST /api/mutations/check) in its own windows, or raise 429."""
    settings = services.settings.ratelimit
    limits = ratelimit.CheckLimits(
        per_agent_minute=settings.checks_per_agent_minute, per_ip_minute=settings.checks_per_ip_minute
    )
    try:
        decision = await ratelimit.take_check(services.redis, limits, agent_id, ip)
    except Exception as exc:  # limits cannot be enforced: run nothing
        raise unavailable("RATE_LIMITER_UNAVAILABLE", "Redis", exc, "the rate limits") from exc
    if not decision.allowed:
        raise _over_limit(decision, agent_id, ip)


async def take_rule_proposal_limit(services, agent_id: str) -> None:
    """Count an agent's proposal of a rule change in its hour, or raise 429."""
    per_hour = services.settings.ratelimit.rule_proposals_per_agent_hour
    try:
        decision = await ratelimit.take_rule_proposal(services.redis, per_hour, agent_id)
    except Exception as exc:  # limits cannot be enforced: record nothing
        raise unavailable("RATE_LIMITER_UNAVAILABLE", "Redis", exc, "the rate limits") from exc
    if not decision.allowed:
        raise _over_limit(decision, agent_id, "")


async def take_gepa_limit(services, action: str, agent_id: str | None, ip: str) -> None:
    """Count a GEPA ``step`` or ``connect`` of the caller (its agent, or its address without a key)
    in its hour, or raise 429."""
    limits = services.settings.ratelimit
    per_hour = limits.gepa_steps_per_client_hour if action == "step" else limits.gepa_connects_per_client_hour
    client = f"agent:{agent_id}" if agent_id else f"ip:{ip}"
    try:
        decision = await ratelimit.take_gepa(services.redis, action, per_hour, client)
    except Exception as exc:  # limits cannot be enforced: start nothing
        raise unavailable("RATE_LIMITER_UNAVAILABLE", "Redis", exc, "the rate limits") from exc
    if not decision.allowed:
        raise _over_limit(decision, agent_id or "", ip)


def _over_limit(decision: ratelimit.Decision, agent_id: str, ip: str) -> ApiError:
    return ApiError(
        429,
        FailureCode.RATE_LIMIT_EXCEEDED.value,
        decision.describe(agent_id, ip),
        headers={"Retry-After": str(decision.retry_after_sec)},
        extra={"retry_after_sec": decision.retry_after_sec},
    )


def _same_proposal(existing: Row | None, body: ProposeRequest) -> ProposeResponse:
    """``existing``: the recorded proposal (a row of _PROPOSAL)."""
    replaces = (body.replaces.trait_name, body.replaces.version) if body.replaces else (None, None)
    if (
        existing is None
        or existing.code != body.code
        or existing.trait_name != body.trait_name
        or (existing.replaces_trait, existing.replaces_version) != replaces
    ):
        raise ApiError(409, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used for a different proposal")
    return _accepted(existing.mutation_id, existing.status, "Mutation already accepted (same Idempotency-Key)")


def _accepted(mutation_id: str, status: str, message: str) -> ProposeResponse:
    return ProposeResponse(
        mutation_id=mutation_id,
        status=status,
        message=message,
        status_url=f"/api/mutations/{mutation_id}/status",
        workflow_id=mutation_workflow_id(mutation_id),
    )
