"""What each agent may do: capability grants (governance/manifest.py AGENT_CAPABILITIES), each
until it expires or an operator revokes it. A registering agent gets the manifest's defaults."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from genesis.db.models import CapabilityGrant
from governance.manifest import AGENT_CAPABILITIES, Manifest


class UnknownCapability(ValueError):
    pass


def _live(now: datetime):
    return and_(
        CapabilityGrant.revoked_at.is_(None),
        or_(CapabilityGrant.expires_at.is_(None), CapabilityGrant.expires_at > now),
    )


def new_grant_id() -> str:
    return f"cap_{secrets.token_hex(8)}"


async def grant(
    conn: AsyncConnection,
    agent_id: str,
    capabilities: Iterable[str],
    granted_by: str,
    ttl_sec: int | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Grant each capability (a new grant beside any live one); their ids."""
    wanted = list(capabilities)
    unknown = [c for c in wanted if c not in AGENT_CAPABILITIES]
    if unknown:
        raise UnknownCapability(f"unknown capabilities {unknown}; agents may hold {', '.join(AGENT_CAPABILITIES)}")
    now = now or datetime.now(UTC)
    expires = now + timedelta(seconds=ttl_sec) if ttl_sec else None
    rows: list[dict[str, object]] = [
        {
            "id": new_grant_id(),
            "agent_id": agent_id,
            "capability": c,
            "granted_by": granted_by,
            "granted_at": now,
            "expires_at": expires,
        }
        for c in wanted
    ]
    if rows:
        await conn.execute(insert(CapabilityGrant), rows)
    return [str(r["id"]) for r in rows]


async def grant_defaults(conn: AsyncConnection, agent_id: str, manifest: Manifest) -> list[str]:
    defaults = manifest.capabilities
    return await grant(conn, agent_id, defaults.agent_defaults, "registration", defaults.ttl_sec)


async def revoke(conn: AsyncConnection, agent_id: str, capability: str, revoked_by: str) -> int:
    """Revoke the agent's live grants of ``capability``; how many there were."""
    now = datetime.now(UTC)
    result = await conn.execute(
        update(CapabilityGrant)
        .where(CapabilityGrant.agent_id == agent_id, CapabilityGrant.capability == capability, _live(now))
        .values(revoked_at=now, revoked_by=revoked_by)
    )
    return result.rowcount or 0


async def live(conn: AsyncConnection, agent_id: str, now: datetime | None = None) -> frozenset[str]:
    statement = select(CapabilityGrant.capability).where(
        CapabilityGrant.agent_id == agent_id, _live(now or datetime.now(UTC))
    )
    return frozenset((await conn.scalars(statement)).all())


async def grants_of(conn: AsyncConnection, agent_id: str) -> list[Row]:
    """Every grant of the agent, live or not, newest first (rows with the table's columns)."""
    table = CapabilityGrant.__table__
    statement = select(table).where(table.c.agent_id == agent_id).order_by(table.c.granted_at.desc(), table.c.id)
    return list((await conn.execute(statement)).all())
