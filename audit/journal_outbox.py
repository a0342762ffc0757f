"""Rows the engine carries into the world's journal: signed receipts (``receipts``) and policy
decisions (``policy_decisions``). Each table keeps its rows' canonical ``body`` and, once the
engine has journaled a row, the journal sequence number that holds it (``journal_seq``), so a row
is carried once and in the order it was made."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import async_sessionmaker

from genesis.db.models import PolicyDecisionRow, ReceiptRow


@dataclass(frozen=True)
class Outbox:
    kind: str  # the journal record kind its rows become
    model: Any  # a row class with id, seq, body and journal_seq


OUTBOXES = (Outbox("receipt", ReceiptRow), Outbox("policy.decision", PolicyDecisionRow))


async def unjournaled(sessions: async_sessionmaker, outbox: Outbox, limit: int = 100) -> list[Any]:
    model = outbox.model
    async with sessions() as session:
        statement = select(model).where(model.journal_seq.is_(None)).order_by(model.seq).limit(limit)
        return list((await session.scalars(statement)).all())


async def mark_journaled(sessions: async_sessionmaker, outbox: Outbox, placed: Mapping[str, int]) -> None:
    model = outbox.model
    async with sessions() as session, session.begin():
        for row_id, seq in placed.items():
            await session.execute(update(model).where(model.id == row_id).values(journal_seq=seq))
