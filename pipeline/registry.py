"""The live trait registry in Redis (`meta:registry:traits`, `meta:registry:version`).

Writers: the activation and rollback activities. Reader: the engine, which loads each entry into
its trait host. Postgres (`trait_versions`) is the durable copy the registry is rebuilt from,
leaving out the versions the engine quarantined (`trait_quarantines`): the live versions of
pipeline/live.py."""

from __future__ import annotations

import json

import redis.asyncio as aioredis
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from genesis.db.models import Mutation, TraitVersion
from genesis.dto import SandboxProfile
from genesis.redis_keys import REGISTRY_TRAITS, REGISTRY_VERSION
from pipeline.live import live_versions


class RegistryEntry(BaseModel):
    trait_name: str
    version: int
    mutation_id: str
    class_name: str
    code: str
    code_hash: str
    # Who proposed it: traits of different agents never share a process in the trait host.
    agent_id: str = ""
    profile: SandboxProfile | None = None


def entry_from_row(row: TraitVersion, mutation: Mutation | None) -> RegistryEntry:
    """The entry of a trait version, with the agent that proposed it and its sandbox profile."""
    return RegistryEntry(
        trait_name=row.trait_name,
        version=row.version,
        mutation_id=row.mutation_id,
        class_name=row.class_name,
        code=row.code,
        code_hash=row.code_hash,
        agent_id=(mutation.agent_id if mutation is not None else "") or "",
        profile=SandboxProfile.of(mutation.sandbox_report if mutation is not None else None),
    )


async def entry_of(session: AsyncSession, row: TraitVersion) -> RegistryEntry:
    """The registry entry of a trait version, with the agent that proposed it."""
    mutation = await session.scalar(select(Mutation).where(Mutation.mutation_id == row.mutation_id))
    return entry_from_row(row, mutation)


async def put_entry(redis: aioredis.Redis, entry: RegistryEntry) -> int:
    """Register (or replace) the live version of a trait; returns the new registry version."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(REGISTRY_TRAITS, entry.trait_name, entry.model_dump_json())
        pipe.incr(REGISTRY_VERSION)
        _, version = await pipe.execute()
    return int(version)


async def remove_entry(redis: aioredis.Redis, trait_name: str) -> int:
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hdel(REGISTRY_TRAITS, trait_name)
        pipe.incr(REGISTRY_VERSION)
        _, version = await pipe.execute()
    return int(version)


async def read_version(redis: aioredis.Redis) -> int:
    return int(await redis.get(REGISTRY_VERSION) or 0)


async def read_entries(redis: aioredis.Redis) -> dict[str, RegistryEntry]:
    raw = await redis.hgetall(REGISTRY_TRAITS)
    return {
        (name.decode() if isinstance(name, bytes) else name): RegistryEntry.model_validate_json(value)
        for name, value in raw.items()
    }


async def replace_all(redis: aioredis.Redis, entries: list[RegistryEntry]) -> int:
    """Self-heal: make the registry exactly ``entries`` (the active rows of Postgres)."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(REGISTRY_TRAITS)
        if entries:
            pipe.hset(REGISTRY_TRAITS, mapping={e.trait_name: e.model_dump_json() for e in entries})
        pipe.incr(REGISTRY_VERSION)
        results = await pipe.execute()
    return int(results[-1])


async def rebuild_from_postgres(sessions: async_sessionmaker, redis: aioredis.Redis) -> int:
    """Self-heal after an engine or Redis restart: the registry becomes the live versions
    (pipeline/live.py: active, and none the engine quarantined, whose rollback may not have
    happened yet)."""
    async with sessions() as session:
        rows = (await session.execute(live_versions())).all()
    entries = [entry_from_row(row, mutation) for row, mutation in rows]
    return await replace_all(redis, entries)


def event_json(event: str, **fields: object) -> str:
    """Telemetry events in the seed's shape: {"event": NAME, ...fields}."""
    return json.dumps({"event": event, **fields}, separators=(",", ":"))
