"""Reading the durable record of quarantined trait versions (``trait_quarantines``; its only
writer is the engine, engine/process/quarantine.py). A quarantined version is not live, whatever its
``trait_versions`` row says until its rollback has run."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from genesis.db.models import TraitQuarantine


def quarantined(mutation_id_column) -> ColumnElement[bool]:
    """SQL condition: the engine quarantined this mutation's version (``~quarantined(...)``: it did not)."""
    return select(TraitQuarantine.mutation_id).where(TraitQuarantine.mutation_id == mutation_id_column).exists()


async def quarantines_of(session: AsyncSession, mutation_ids: Iterable[str]) -> dict[str, TraitQuarantine]:
    """The quarantine records of these mutations, by mutation id (absent: not quarantined)."""
    ids = sorted(set(mutation_ids))
    if not ids:
        return {}
    rows = (await session.scalars(select(TraitQuarantine).where(TraitQuarantine.mutation_id.in_(ids)))).all()
    return {row.mutation_id: row for row in rows}
