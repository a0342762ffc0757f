"""The versions of the world's rules (governance/manifest.py) in Postgres: the highest version is
in force. The first version is written when first asked for, from the defaults and the configured
snapshot retention; every later one comes from an applied governance proposal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from genesis.config import Settings
from genesis.db.models import ManifestVersion
from governance import manifest as rules

_CURRENT = select(ManifestVersion.version, ManifestVersion.hash, ManifestVersion.document).order_by(
    ManifestVersion.version.desc()
)


@dataclass(frozen=True)
class Current:
    version: int
    hash: str
    document: dict[str, Any]

    @property
    def manifest(self) -> rules.Manifest:
        return rules.Manifest.model_validate(self.document)


def initial_document(settings: Settings | None) -> dict[str, Any]:
    if settings is None:
        return rules.default_document()
    return rules.default_document(keep_last=settings.journal.keep_last, keep_every=settings.journal.keep_every)


async def current(conn: AsyncConnection, settings: Settings | None = None) -> Current:
    """The manifest in force (version 1 is written the first time anyone asks)."""
    row = (await conn.execute(_CURRENT.limit(1))).first()
    if row is None:
        document = initial_document(settings)
        await conn.execute(
            insert(ManifestVersion)
            .values(version=1, hash=rules.manifest_hash(document), document=document, cause="initial")
            .on_conflict_do_nothing()
        )
        row = (await conn.execute(_CURRENT.limit(1))).one()
    return Current(row.version, row.hash, row.document)


async def document_of(conn: AsyncConnection, version: int) -> dict[str, Any] | None:
    return await conn.scalar(select(ManifestVersion.document).where(ManifestVersion.version == version))


async def history(conn: AsyncConnection, limit: int = 50) -> list[Row]:
    """Versions newest first: rows of version, hash, cause, created_at."""
    m = ManifestVersion
    statement = select(m.version, m.hash, m.cause, m.created_at).order_by(m.version.desc()).limit(limit)
    return list((await conn.execute(statement)).all())


class ManifestMoved(Exception):
    """The manifest in force is no longer the one a change was made against."""


async def record(conn: AsyncConnection, document: dict[str, Any], cause: str, base_hash: str) -> Current:
    """Put ``document`` in force as the next version, if the manifest in force still has
    ``base_hash`` (ManifestMoved otherwise; ManifestError when the document is not valid)."""
    document = rules.normalized(document)
    row = (await conn.execute(_CURRENT.limit(1).with_for_update())).first()
    if row is None or row.hash != base_hash:
        raise ManifestMoved(f"the manifest in force is {row.hash if row else 'none'}, not {base_hash}")
    new = Current(row.version + 1, rules.manifest_hash(document), document)
    try:
        await conn.execute(
            insert(ManifestVersion).values(version=new.version, hash=new.hash, document=document, cause=cause[:120])
        )
    except IntegrityError:  # another change took this version first
        raise ManifestMoved(f"version {new.version} was written meanwhile") from None
    return new


async def amend(conn: AsyncConnection, cause: str, **sections: dict[str, Any]) -> Current:
    """The manifest in force with some fields of some sections changed (``retention={"segments":
    "delete"}``), recorded as the next version: for operators' tools and benchmarks that set a
    rule directly (agents change rules through governance proposals)."""
    now = await current(conn)
    document = dict(now.document)
    for section, fields in sections.items():
        document[section] = {**(document.get(section) or {}), **fields}
    return await record(conn, document, cause, now.hash)
