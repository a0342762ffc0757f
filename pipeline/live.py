"""What "live" means for a trait, defined once: its version recorded ``active`` in Postgres
(``trait_versions``) that the engine has not quarantined (``trait_quarantines``).

The registry in Redis (``meta:registry:traits``) mirrors this set (activation and rollback write
both, and the engine rebuilds the registry from it); ``GET /api/traits``, ``GET /api/stats``, the
CLI and the viewer count and list it. What the engine's trait host runs at a given moment
(``active_traits`` of its status) follows the registry within a refresh: a surface that shows it
calls it *running*, never *live*."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from genesis.db.models import Mutation, TraitQuarantine, TraitVersion
from pipeline.quarantines import quarantined

# How many quarantined traits ``latest_quarantines`` answers at most (newest first).
QUARANTINES_SHOWN = 100


def is_live() -> ColumnElement[bool]:
    """SQL condition on ``trait_versions``: this version is live."""
    return and_(TraitVersion.status == "active", ~quarantined(TraitVersion.mutation_id))


def live_versions() -> Select:
    """The live versions (one per trait, by name) with the mutations that made them (None for a
    version registered outside the pipeline)."""
    return (
        select(TraitVersion, Mutation)
        .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
        .where(is_live())
        .order_by(TraitVersion.trait_name)
    )


async def live_trait_names(session: AsyncSession) -> list[str]:
    """The names of the live traits, sorted."""
    return list((await session.scalars(select(TraitVersion.trait_name).where(is_live()).order_by("trait_name"))).all())


async def latest_quarantines(
    session: AsyncSession,
) -> list[tuple[TraitQuarantine, TraitVersion, Mutation | None, int | None]]:
    """The traits whose newest version the engine quarantined (a newer version of a trait ends
    its entry here), newest quarantine first, at most QUARANTINES_SHOWN: each quarantine record
    with its version, the mutation that made it, and the version of that trait live now (None:
    none)."""
    newest = (
        select(func.max(TraitVersion.version))
        .where(TraitVersion.trait_name == TraitQuarantine.trait_name)
        .correlate(TraitQuarantine)
        .scalar_subquery()
    )
    rows = (
        await session.execute(
            select(TraitQuarantine, TraitVersion, Mutation)
            .join(TraitVersion, TraitVersion.mutation_id == TraitQuarantine.mutation_id)
            .outerjoin(Mutation, Mutation.mutation_id == TraitQuarantine.mutation_id)
            .where(TraitVersion.version == newest)
            .order_by(TraitQuarantine.quarantined_at.desc(), TraitQuarantine.trait_name)
            .limit(QUARANTINES_SHOWN)
        )
    ).all()
    now = await live_now(session, {version.trait_name for _, version, _ in rows})
    return [(quarantine, version, mutation, now.get(version.trait_name)) for quarantine, version, mutation in rows]


async def live_now(session: AsyncSession, names: set[str]) -> dict[str, int]:
    """The live version of each of ``names`` that has one."""
    if not names:
        return {}
    found = await session.execute(
        select(TraitVersion.trait_name, TraitVersion.version).where(
            is_live(), TraitVersion.trait_name.in_(sorted(names))
        )
    )
    return {name: version for name, version in found.all()}


DEPARTURES_SHOWN = 20
LATE_VERDICT = "late verdict:"  # the rollback_reason of a late verdict of the live ledger


async def latest_departures(session: AsyncSession) -> list[tuple[TraitVersion, Mutation, int | None]]:
    """The kept traits selection took out latest (extinct, or rolled back by a late verdict),
    newest first, at most DEPARTURES_SHOWN: each version, its mutation and the version of that
    trait live now (None: none)."""
    rows = (
        await session.execute(
            select(TraitVersion, Mutation)
            .join(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
            .where(
                (TraitVersion.status == "extinct")
                | ((TraitVersion.status == "rolled_back") & Mutation.rollback_reason.startswith(LATE_VERDICT))
            )
            .order_by(Mutation.updated_at.desc())
            .limit(DEPARTURES_SHOWN)
        )
    ).all()
    now = await live_now(session, {row.trait_name for row, _ in rows})
    return [(row, mutation, now.get(row.trait_name)) for row, mutation in rows]
