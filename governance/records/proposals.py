"""Governance proposals, to change the world's rules, in Postgres (``governance_proposals``):
recorded by the API, moved along their life (governance/lifecycle.py) by the GovernanceWorkflow's
activities. Every move is checked against the lifecycle under a row lock, so two deciders cannot
both win and no step is skipped. A proposal of a trait's code is a mutation proposal
(pipeline/mutation_proposals.py)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from genesis.db.models import GovernanceProposal
from governance import lifecycle


def new_proposal_id() -> str:
    return f"gov_{secrets.token_hex(8)}"


def workflow_id(proposal_id: str) -> str:
    return f"governance-{proposal_id}"


async def create(conn: AsyncConnection, **fields: Any) -> str:
    proposal_id = fields.pop("id", None) or new_proposal_id()
    await conn.execute(
        insert(GovernanceProposal).values(
            id=proposal_id, status=lifecycle.PROPOSED, workflow_id=workflow_id(proposal_id), **fields
        )
    )
    return proposal_id


async def undecided_of(conn: AsyncConnection, author: str) -> int:
    """How many of ``author``'s proposals are not decided yet, counted under a lock of that author
    held to the end of the caller's transaction (so two at once cannot both pass a limit)."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('genesis.rules'), hashtext(:a))"), {"a": author})
    table = GovernanceProposal.__table__
    statement = select(func.count()).where(table.c.author == author, table.c.status.not_in(lifecycle.FINAL))
    return int((await conn.execute(statement)).scalar_one())


async def get(conn: AsyncConnection, proposal_id: str) -> GovernanceProposal | None:
    row = (await conn.execute(select(GovernanceProposal.__table__).where(GovernanceProposal.id == proposal_id))).first()
    return row  # type: ignore[return-value]  # a Row with the table's columns


async def listing(conn: AsyncConnection, status: str | None, limit: int, before_seq: int | None) -> list[Any]:
    table = GovernanceProposal.__table__
    statement = select(table).order_by(table.c.seq.desc()).limit(limit)
    if status is not None:
        statement = statement.where(table.c.status == status)
    if before_seq is not None:
        statement = statement.where(table.c.seq < before_seq)
    return list((await conn.execute(statement)).all())


async def move(conn: AsyncConnection, proposal_id: str, to: str, **fields: Any) -> Any:
    """Move a proposal to ``to`` (IllegalTransition when its life has no such step); the row as it
    was before. Runs in the caller's transaction."""
    table = GovernanceProposal.__table__
    row = (await conn.execute(select(table).where(table.c.id == proposal_id).with_for_update())).first()
    if row is None:
        raise LookupError(f"no proposal {proposal_id}")
    lifecycle.check(row.status, to)
    await conn.execute(
        update(GovernanceProposal)
        .where(GovernanceProposal.id == proposal_id)
        .values(status=to, updated_at=datetime.now(UTC), **fields)
    )
    return row
