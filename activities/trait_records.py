"""What every change of a trait's life shares: the trait's lock, and the Evolution Feed line."""

from __future__ import annotations

import hashlib

import redis.asyncio as aioredis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from evolution import feed
from genesis.db.models import EvolutionCycle
from genesis.ids import mutation_workflow_id


def trait_lock_key(trait_name: str) -> int:
    """A stable signed 64-bit key for the trait's transaction-level advisory lock."""
    return int.from_bytes(hashlib.sha256(f"genesis-trait:{trait_name}".encode()).digest()[:8], "big", signed=True)


async def lock_trait(session: AsyncSession, trait_name: str) -> None:
    """Serialise the activations and rollbacks of one trait (released at commit or rollback):
    the live-version check and the swap happen as one step, even for a trait not yet live."""
    await session.execute(select(func.pg_advisory_xact_lock(trait_lock_key(trait_name))))


async def announce(
    sessions: async_sessionmaker, redis: aioredis.Redis, action: str, mutation_id: str, message: str, **extra
) -> None:
    """The Evolution Feed line of a step in a mutation's life (with the cycle that proposed it, if any)."""
    async with sessions() as session:
        trigger_id = await session.scalar(
            select(EvolutionCycle.trigger_id).where(EvolutionCycle.mutation_id == mutation_id).limit(1)
        )
    await feed.publish(
        redis,
        "patcher",
        action,
        message,
        trigger_id=trigger_id,
        mutation_id=mutation_id,
        workflow_id=mutation_workflow_id(mutation_id),
        **extra,
    )
