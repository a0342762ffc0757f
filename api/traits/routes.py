"""Live traits and their versions: GET /api/traits, GET /api/traits/{trait_name}, and the family
tree GET /api/traits/{trait_name}/lineage. (The propose-time check of a proposal that modifies a
live trait is part of api/mutations/admission.py.)"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from api import engine_status
from api.deps import Services, ServicesDep, SessionsDep
from api.errors import ApiError, ErrorResponse, Responses, unavailable
from api.mutations.records import extinct_reason, quarantine_info, replaces_ref, verdict_reason
from api.mutations.schemas import trait_name_problem
from api.paging import Cursor, Keyset, paged, text, whole
from api.traits.schemas import (
    DepartedTrait,
    LineageEdge,
    LineageNode,
    LiveTraitVersion,
    PendingModification,
    QuarantinedTrait,
    QuarantineInfo,
    TraitDetailResponse,
    TraitLedgerInfo,
    TraitLineageResponse,
    TraitsResponse,
    TraitSummary,
    TraitVersionInfo,
)
from evolution import world_metrics
from genesis import redis_keys as keys, rules
from genesis.db.models import Mutation, TraitQuarantine, TraitVersion
from genesis.dto import MutationStatus, terminal_statuses
from governance.records import manifests
from pipeline import lineage, live
from pipeline.quarantines import quarantines_of

log = logging.getLogger("genesis.api")
router = APIRouter(prefix="/api/traits", tags=["traits"])
MAX_LIMIT = 500
TRAIT_PAGES = Keyset("traits", text(rules.TRAIT_NAME_PATTERN))  # (trait_name,), ascending
VERSION_PAGES = Keyset("trait_versions", whole(2**31))  # (version,), descending; an integer column

ERRORS: Responses = {
    404: {"model": ErrorResponse, "description": "No version of this trait was ever activated"},
    422: {"model": ErrorResponse, "description": "trait_name is not snake_case"},
    503: {"model": ErrorResponse, "description": "Postgres is unavailable"},
}


def _check_name(trait_name: str) -> None:
    """422 for a trait name that is not snake_case."""
    problem = trait_name_problem(trait_name)
    if problem:
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            f"trait_name: {problem}",
            extra={"errors": [{"field": "trait_name", "message": problem}]},
        )


def _db_down(exc: Exception) -> ApiError:
    return unavailable("DATABASE_UNAVAILABLE", "Postgres", exc)


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


async def _carriers(services: Services) -> tuple[dict[str, int] | None, int | None]:
    """Carriers per trait at the latest WorldSnapshot of the engine (None without one)."""
    try:
        latest = await world_metrics.recent_snapshots(services.redis, services.settings.engine.snapshot_interval, 1)
    except (RedisError, OSError) as exc:  # optional information: the traits are still listed
        log.warning("carriers unavailable: %s", exc)
        return None, None
    if not latest:
        return None, None
    usage = latest[0].get("trait_usage") or {}
    return {str(k): int(v) for k, v in usage.items() if isinstance(v, (int, float))}, latest[0].get("tick")


async def _departed(session) -> list[DepartedTrait]:
    """The latest kept traits selection took out: extinct, or rolled back by a late verdict."""
    rows = await live.latest_departures(session)
    return [
        DepartedTrait(
            trait_name=row.trait_name,
            version=row.version,
            mutation_id=row.mutation_id,
            agent_id=mutation.agent_id,
            how="extinct" if row.status == "extinct" else "late_verdict",
            reason=extinct_reason(mutation) if row.status == "extinct" else mutation.rollback_reason,
            at=mutation.updated_at.timestamp(),
            live_version=live_version,
        )
        for row, mutation, live_version in rows
    ]


async def _ledger(services: Services) -> dict[str, Any]:
    """The engine's live fitness ledger as it last published it (``ledger:traits``; {} without one)."""
    try:
        raw = await services.redis.get(keys.LEDGER_TRAITS)
        return dict(json.loads(raw)) if raw else {}
    except (RedisError, OSError, ValueError) as exc:  # optional information: the traits are still listed
        log.warning("ledger unavailable: %s", exc)
        return {}


def _ledger_info(ledger: dict[str, Any], trait_name: str, mutation_id: str) -> TraitLedgerInfo | None:
    entry = (ledger.get("traits") or {}).get(trait_name)
    if not isinstance(entry, dict) or entry.get("mutation_id") != mutation_id:
        return None  # not measured yet, or the ledger's entry is another version's
    return TraitLedgerInfo.model_validate({**entry, "tick": ledger.get("tick", 0)})


async def _running_traits(services: Services) -> set[str] | None:
    """The traits the engine ran at its last report; None when it is not running (or Redis is down)."""
    try:
        status = await engine_status.read(services.redis)
    except (RedisError, OSError) as exc:  # optional information: the traits are still listed
        log.warning("engine status unavailable: %s", exc)
        return None
    return set(engine_status.running_traits(status)) if engine_status.running(status) else None


@router.get("", response_model=TraitsResponse, responses=paged({422: ERRORS[422], 503: ERRORS[503]}))
async def list_traits(
    request: Request,
    response: Response,
    services: ServicesDep,
    limit: int = Query(default=MAX_LIMIT, ge=1, le=MAX_LIMIT, description="At most this many traits, by name"),
    cursor: Cursor = None,
) -> TraitsResponse:
    """The live traits (one live version each), by name: the version an agent would name in
    ``replaces``, who made it, when it went live, how its mutation was judged, whether the engine
    runs it, and its carriers at the latest WorldSnapshot. A version the engine quarantined is not
    live, even before its rollback has run: the first page lists it under ``quarantined``, with
    the reason."""
    query = live.live_versions().limit(limit + 1)
    after = TRAIT_PAGES.decode(cursor)
    if after is not None:
        query = query.where(TraitVersion.trait_name > after[0])
    try:
        async with services.sessions() as session:
            rows = (await session.execute(query)).all()
            quarantines = await live.latest_quarantines(session) if after is None else []
            departed = await _departed(session) if after is None else []
            max_live = (await manifests.current(await session.connection())).manifest.selection.max_live_traits
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    rows, next_cursor = TRAIT_PAGES.page(request, response, rows, limit, lambda row: (row[0].trait_name,))
    carriers, tick = await _carriers(services)
    running = await _running_traits(services)
    ledger = await _ledger(services)
    return TraitsResponse(
        traits=[
            TraitSummary(
                trait_name=row.trait_name,
                version=row.version,
                mutation_id=row.mutation_id,
                agent_id=mutation.agent_id if mutation else None,
                class_name=row.class_name,
                code_hash=row.code_hash,
                activated_at=_ts((mutation.activated_at if mutation else None) or row.created_at),
                carriers=carriers.get(row.trait_name, 0) if carriers is not None else None,
                running=row.trait_name in running if running is not None else None,
                mutation_status=mutation.status if mutation else None,
                fitness_verdict=mutation.fitness_verdict if mutation else None,
                verdict_reason=verdict_reason(mutation) if mutation else None,
                ledger=_ledger_info(ledger, row.trait_name, row.mutation_id),
            )
            for row, mutation in rows
        ],
        quarantined=[
            QuarantinedTrait(
                trait_name=version.trait_name,
                version=version.version,
                mutation_id=version.mutation_id,
                agent_id=mutation.agent_id if mutation else None,
                mutation_status=mutation.status if mutation else None,
                quarantine=QuarantineInfo(
                    reason=quarantine.reason, quarantined_at=quarantine.quarantined_at.timestamp()
                ),
                live_version=live_version,
            )
            for quarantine, version, mutation, live_version in quarantines
        ],
        departed=departed,
        snapshot_tick=tick,
        max_live_traits=max_live,
        next_cursor=next_cursor,
    )


@router.get("/{trait_name}", response_model=TraitDetailResponse, responses=paged(ERRORS))
async def trait_detail(
    trait_name: str,
    request: Request,
    response: Response,
    services: ServicesDep,
    limit: int = Query(default=100, ge=1, le=MAX_LIMIT, description="At most this many versions, newest first"),
    cursor: Cursor = None,
) -> TraitDetailResponse:
    """One trait: its live version with the **source code** (what a modification starts from),
    every activated version with its status (``quarantined``: the engine stopped running it), and
    the proposals of it still in flight. ``versions`` is paged (``limit``, ``cursor``)."""
    _check_name(trait_name)
    older_than = VERSION_PAGES.decode(cursor)
    versions_query = (
        select(TraitVersion, Mutation)
        .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
        .where(TraitVersion.trait_name == trait_name)
        .order_by(TraitVersion.version.desc())
        .limit(limit + 1)
    )
    if older_than is not None:
        versions_query = versions_query.where(TraitVersion.version < older_than[0])
    in_flight = {MutationStatus.queued.value, MutationStatus.validating.value, MutationStatus.sandbox_ok.value}
    in_flight -= {s.value for s in terminal_statuses(services.settings.activate_mutations)}
    try:
        async with services.sessions() as session:
            rows, next_cursor = VERSION_PAGES.page(
                request,
                response,
                (await session.execute(versions_query)).all(),
                limit,
                lambda pair: (pair[0].version,),
            )
            active_row = next((pair for pair in rows if pair[0].status == "active"), None)
            if active_row is None:  # the live version may be older than the newest ``limit``
                active_row = (
                    await session.execute(
                        select(TraitVersion, Mutation)
                        .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
                        .where(TraitVersion.trait_name == trait_name, TraitVersion.status == "active")
                    )
                ).first()
            quarantines = await quarantines_of(
                session, [row.mutation_id for row, _ in rows] + ([active_row[0].mutation_id] if active_row else [])
            )
            pending = (
                await session.scalars(
                    select(Mutation)
                    .where(Mutation.trait_name == trait_name, Mutation.status.in_(sorted(in_flight)))
                    .order_by(Mutation.created_at)
                    .limit(50)
                )
            ).all()
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    if not rows and older_than is None:
        raise ApiError(
            404,
            "TRAIT_NOT_FOUND",
            f"no version of trait '{trait_name}' was ever activated"
            + (f" ({len(pending)} proposal(s) of it in flight)" if pending else "")
            + "; GET /api/traits lists the live traits",
        )
    carriers, tick = await _carriers(services)
    live = None
    if active_row is not None and active_row[0].mutation_id not in quarantines:
        row, mutation = active_row
        live = LiveTraitVersion(
            **_version_info(row, mutation, None).model_dump(), code=row.code, file_path=row.file_path
        )
    return TraitDetailResponse(
        trait_name=trait_name,
        live_version=live.version if live is not None else None,
        live=live,
        versions=[_version_info(row, mutation, quarantines.get(row.mutation_id)) for row, mutation in rows],
        pending=[
            PendingModification(
                mutation_id=m.mutation_id,
                agent_id=m.agent_id,
                status=m.status,
                replaces=replaces_ref(m),
                created_at=m.created_at.timestamp(),
            )
            for m in pending
        ],
        carriers=carriers.get(trait_name, 0) if carriers is not None and live is not None else None,
        snapshot_tick=tick,
        next_cursor=next_cursor,
    )


@router.get("/{trait_name}/lineage", response_model=TraitLineageResponse, responses=ERRORS)
async def trait_lineage(
    trait_name: str,
    sessions: SessionsDep,
    depth: int = Query(
        default=lineage.MAX_DEPTH,
        ge=0,
        le=lineage.MAX_DEPTH,
        description="Generations of ancestors to follow above the trait's versions",
    ),
) -> TraitLineageResponse:
    """The family tree of a trait: its activated versions and, across traits, the versions they
    were made from (the versions live when each was proposed), generation by generation, with
    each version's fitness verdict and how it was made. Bounded: ``depth`` generations, at most
    500 versions (``truncated`` says when a bound left ancestors out)."""
    _check_name(trait_name)
    try:
        async with sessions() as session:
            tree = await lineage.family_tree(session, trait_name, depth)
    except (SQLAlchemyError, OSError) as exc:
        raise _db_down(exc) from exc
    if not tree.versions:
        raise ApiError(
            404,
            "TRAIT_NOT_FOUND",
            f"no version of trait '{trait_name}' was ever activated; GET /api/traits lists the live traits",
        )
    return TraitLineageResponse(
        trait_name=trait_name,
        nodes=[_lineage_node(version) for version in tree.versions],
        edges=[LineageEdge(parent=parent, child=child) for parent, child in tree.edges],
        depth=tree.depth,
        truncated=tree.truncated,
    )


def _lineage_node(version: lineage.TreeVersion) -> LineageNode:
    row, mutation, recorded = version.row, version.mutation, version.lineage
    return LineageNode(
        mutation_id=row.mutation_id,
        trait_name=row.trait_name,
        version=row.version,
        generation=version.generation,
        agent_id=mutation.agent_id if mutation else None,
        status=version.status,
        mutation_status=mutation.status if mutation else None,
        fitness_verdict=mutation.fitness_verdict if mutation else None,
        origin=recorded.origin if recorded else None,
        operators=recorded.operators if recorded else [],
        seed=recorded.seed if recorded else None,
        seed_trait=recorded.seed_trait if recorded else None,
        created_at=row.created_at.timestamp(),
    )


def _version_info(row: TraitVersion, mutation: Mutation | None, quarantine: TraitQuarantine | None) -> TraitVersionInfo:
    """``quarantine``: the engine's record, if it quarantined this version (an active row whose
    rollback has not run yet is shown as ``quarantined``)."""
    status = "quarantined" if quarantine is not None and row.status == "active" else row.status
    return TraitVersionInfo(
        version=row.version,
        status=status,
        mutation_id=row.mutation_id,
        agent_id=mutation.agent_id if mutation else None,
        class_name=row.class_name,
        code_hash=row.code_hash,
        activated_at=_ts((mutation.activated_at if mutation else None) or row.created_at),
        mutation_status=mutation.status if mutation else None,
        replaced_version=mutation.replaced_version if mutation else None,
        rollback_reason=mutation.rollback_reason if mutation else None,
        extinct_reason=extinct_reason(mutation) if mutation else None,
        quarantine=quarantine_info(quarantine),
    )
